"""`--base-url`: evaluate a server evalkit did not start, checked before anything is created.

Users write a server's address the way their tools do: the root (`http://host:8000`), the
OpenAI SDK's and vLLM's/SGLang's docs' base URL (`.../v1`), or lm-eval's full endpoint
(`.../v1/completions`). All three name the same server; evalkit keeps the root (a proxy prefix
before `/v1` is kept too).

The server is then asked what it serves (`GET /v1/models`), so a name mismatch is one clear line
before any question instead of every request failing with "model does not exist": the
configured served name is used when listed; otherwise `--served-name`; otherwise the only model
the server lists (said on the progress view and recorded in run.json); otherwise the list.
"""

from __future__ import annotations

from urllib.parse import urlparse, urlunparse

from evalkit.errors import ConfigError

ENDPOINT_SUFFIXES = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/v1")
PROBE_TIMEOUT_S = 10.0


def normalise_base_url(url: str) -> str:
    """`http://h:8000`, `.../v1`, `.../v1/completions`, `.../v1/chat/completions` -> `http://h:8000`."""
    parsed = urlparse(url.strip())
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigError(f"--base-url {url}: expected http(s)://HOST[:PORT][/v1[/completions]]")
    if parsed.query or parsed.fragment:
        raise ConfigError(f"--base-url {url}: a server address has no query or fragment")
    path = parsed.path.rstrip("/")
    for suffix in ENDPOINT_SUFFIXES:
        if path.endswith(suffix):
            path = path[: -len(suffix)]
            break
    return urlunparse((parsed.scheme, parsed.netloc, path, "", "", ""))


def served_models(root: str) -> list[str]:
    """The model ids the server lists; a ConfigError naming the URL when it cannot say."""
    import httpx

    url = root + "/v1/models"
    try:
        response = httpx.get(url, timeout=PROBE_TIMEOUT_S)
    except httpx.HTTPError as e:
        raise ConfigError(f"--base-url {root}: no answer from {url} ({type(e).__name__}: {e})") from e
    if response.status_code != 200:
        raise ConfigError(f"--base-url {root}: {url} answered HTTP {response.status_code}: {response.text[:200]}")
    try:
        return [str(m["id"]) for m in response.json()["data"]]
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"--base-url {root}: {url} is not an OpenAI model list ({e})") from e


def choose_served_name(root: str, configured: str, requested: str | None, served: list[str]) -> tuple[str, str | None]:
    """The name to send as `model`, and a note when it is not the configured one."""
    listing = ", ".join(repr(s) for s in served) or "none"
    if requested is not None:
        if requested not in served:
            raise ConfigError(f"--served-name {requested}: {root} does not serve it (it serves {listing})")
        return requested, None if requested == configured else f"using --served-name {requested!r}"
    if configured in served:
        return configured, None
    if len(served) == 1:
        return served[0], (f"{root} serves {served[0]!r}, not the config's {configured!r}: using {served[0]!r} "
                           f"(--served-name picks another)")
    raise ConfigError(f"--base-url {root}: the config's served name {configured!r} is not served (the server lists "
                      f"{listing}); pick one with --served-name NAME")
