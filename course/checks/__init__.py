"""Visible checks: quick, friendly checks a learner runs right after writing an exercise.

They cover the simple cases (square shapes, no mask); the hidden tests add the cases that
catch subtler mistakes (non-square shapes, masks, large inputs, injected weights).
"""
