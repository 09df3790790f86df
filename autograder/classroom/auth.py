"""The classroom hub's login: one generated password per account, checked on the hub's page.

``python -m autograder classroom start`` writes the accounts file (root-only, ``0600``) and
prints the passwords once; this authenticator reads that file at each login, so a password
changed in it takes effect without restarting the hub. It never creates system accounts
(``classroom start`` does, with ``useradd``): each hub user's server runs as the system account
of the same name (JupyterHub's ``LocalProcessSpawner``).
"""

from __future__ import annotations

import hmac
import json
from pathlib import Path

from jupyterhub.auth import Authenticator
from traitlets import Unicode


class AccountsAuthenticator(Authenticator):
    """Accepts a login whose password matches the account's entry in ``accounts_file``."""

    accounts_file = Unicode(
        help="JSON file {username: password}, readable by the hub only (written by "
             "`python -m autograder classroom start`)."
    ).tag(config=True)

    def _accounts(self) -> dict[str, str]:
        try:
            data = json.loads(Path(self.accounts_file).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.log.error("cannot read the classroom accounts file %s", self.accounts_file)
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    async def authenticate(self, handler, data):
        """The username when its password matches (compared in constant time), else None."""
        name = str(data.get("username", "")).strip()
        given = str(data.get("password", ""))
        expected = self._accounts().get(name)
        if expected is None or not hmac.compare_digest(given.encode(), expected.encode()):
            self.log.warning("failed login for %r", name)
            return None
        return name
