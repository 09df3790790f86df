"""``python -m autograder.sandbox SPEC -- CMD``: start a kernel inside the sandbox (the argv
that ``autograder.sandbox.kernel_files`` writes into each kernel spec)."""

from autograder.sandbox import main

main()
