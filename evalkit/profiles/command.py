"""Any OpenAI-compatible server: the config gives the argv template (`engine.command`).

Placeholders `{python}`, `{host}`, `{port}`, `{model}` and `{served_name}` are substituted in each
argv element; nothing is ever passed through a shell. The template reaches this profile the way
every profile gets what it needs, through `Launch`, so the launch code has no case for it. The
template is the whole command line: logical settings have no flags here (use args instead).
The server may be anything, so it has no package to prove unless the config names one
(`engine.package`), and PYTHONSAFEPATH is not set: a template running `python serve.py` relies on
the script's directory being first on sys.path, which the variable would remove.
"""

from __future__ import annotations

from evalkit.config import EngineSettings
from evalkit.errors import ConfigError
from evalkit.profiles import Launch, Profile


def template_flags(settings: EngineSettings, launch: Launch) -> list[str]:
    """The config's argv template with the launch placeholders substituted in every element."""
    if not launch.template:
        raise ConfigError("engine.command: the command profile needs an argv template")
    values = {
        "python": launch.python,
        "host": launch.host,
        "port": str(launch.port),
        "model": launch.model,
        "served_name": launch.served_name,
    }
    out = []
    for part in launch.template:
        for key, value in values.items():
            part = part.replace("{" + key + "}", value)
        out.append(part)
    return out


PROFILE = Profile(name="command", entrypoint=(), flags=template_flags, safe_path=False)
