"""What the identity provider publishes: its discovery document and its public keys (JWKS).

The discovery document (``ALGENTA_OIDC_DISCOVERY_URL``, by default under the issuer) is fetched
once and kept; its ``issuer`` must be the configured one, word for word. The keys come from
``ALGENTA_OIDC_JWKS_URL`` or the document's ``jwks_uri``, through PyJWT's
:class:`~jwt.PyJWKClient`: kept ``ALGENTA_OIDC_JWKS_CACHE_SECONDS``, fetched again at once when
a token names a key id (``kid``) they do not hold (a rotation), but never twice within
``ALGENTA_OIDC_JWKS_REFRESH_SECONDS`` (so tokens with made-up key ids cannot make this server
hammer the provider). A key removed from the provider's set is refused from the next fetch on.

Every fetch is blocking (``urllib`` in PyJWT, a sync ``httpx`` call here): the async callers run
it in a worker thread. Every failure is an :class:`~algenta_graph.errors.IdentityProviderError`
naming the URL, never a key or a document taken on trust.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any

import httpx
from jwt import PyJWK, PyJWKClient
from jwt.exceptions import PyJWKClientConnectionError, PyJWKClientError, PyJWKSetError

from algenta_graph.errors import IdentityProviderError
from algenta_graph.serving.oidc_settings import ENV_DISCOVERY_URL, OIDCSettings, check_url

__all__ = ["IdentityProvider"]

_TIMEOUT = 10.0


class IdentityProvider:
    """One identity provider's published metadata and keys, fetched on first use and kept.

    Args:
        settings: the provider, as this server trusts it.
    """

    def __init__(self, settings: OIDCSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._metadata: Mapping[str, Any] | None = None
        self._keys: PyJWKClient | None = None

    # -- the discovery document --------------------------------------------------------------

    def metadata(self) -> Mapping[str, Any]:
        """The discovery document (blocking; fetched once, kept once it is right).

        Raises:
            IdentityProviderError: unreachable, not a JSON object, or another issuer's.
        """
        with self._lock:
            if self._metadata is None:
                self._metadata = self._fetch_metadata()
            return self._metadata

    async def ametadata(self) -> Mapping[str, Any]:
        """:meth:`metadata`, in a worker thread."""
        return await asyncio.to_thread(self.metadata)

    def _fetch_metadata(self) -> Mapping[str, Any]:
        url = self.settings.discovery_url
        try:
            response = httpx.get(url, timeout=_TIMEOUT, follow_redirects=False)
        except httpx.HTTPError as exc:
            raise IdentityProviderError(
                f"the identity provider's discovery document {url} cannot be read: {exc}"
            ) from None
        if response.status_code != 200:
            raise IdentityProviderError(
                f"the identity provider's discovery document {url} answered HTTP "
                f"{response.status_code}"
            )
        try:
            document = response.json()
        except ValueError:
            document = None
        if not isinstance(document, dict):
            raise IdentityProviderError(f"{url} is not a discovery document (not a JSON object)")
        if document.get("issuer") != self.settings.issuer:
            raise IdentityProviderError(
                f"{url} names the issuer {document.get('issuer')!r}, not the configured "
                f"{self.settings.issuer!r} (set {ENV_DISCOVERY_URL} to this issuer's document)"
            )
        return document

    def endpoint(self, name: str) -> str:
        """A URL of the discovery document (``authorization_endpoint``, ``token_endpoint``...).

        Raises:
            IdentityProviderError: the document has none, or not an https:// one.
        """
        value = self.metadata().get(name)
        if not isinstance(value, str) or not value:
            raise IdentityProviderError(
                f"the identity provider's discovery document {self.settings.discovery_url} "
                f"has no {name}"
            )
        try:
            return check_url(f"the discovery document's {name}", value)
        except ValueError as exc:
            raise IdentityProviderError(str(exc)) from None

    # -- the keys ------------------------------------------------------------------------------

    def _key_client(self) -> PyJWKClient:
        with self._lock:
            if self._keys is not None:
                return self._keys
        url = self.settings.jwks_url or self.endpoint("jwks_uri")
        client = PyJWKClient(
            url,
            cache_jwk_set=True,
            lifespan=self.settings.jwks_cache_seconds,
            cooldown_duration=self.settings.jwks_refresh_seconds,
            timeout=_TIMEOUT,
        )
        with self._lock:
            if self._keys is None:
                self._keys = client
            return self._keys

    def signing_key(self, kid: str) -> PyJWK | None:
        """The provider's public key ``kid`` (blocking: the keys may be fetched).

        ``None`` when the provider has no such key, even after the refresh an unknown key id
        allows (not within ``ALGENTA_OIDC_JWKS_REFRESH_SECONDS`` of the last fetch).

        Raises:
            IdentityProviderError: the keys cannot be fetched, or publish no usable key.
        """
        client = self._key_client()
        try:
            client.get_signing_keys()  # the keys in force (cached), or why they cannot be read
        except PyJWKClientConnectionError as exc:
            raise IdentityProviderError(
                f"the identity provider's keys cannot be fetched from {client.uri}: {exc}"
            ) from None
        except (PyJWKClientError, PyJWKSetError) as exc:
            raise IdentityProviderError(
                f"the identity provider's keys at {client.uri} are unusable: {exc}"
            ) from None
        try:
            return client.get_signing_key(kid)
        except (PyJWKClientError, PyJWKSetError):  # (a failed refresh too: the key is unknown)
            return None

    @property
    def keys_url(self) -> str:
        """Where the keys are fetched from (once known)."""
        return self._keys.uri if self._keys is not None else (self.settings.jwks_url or "")
