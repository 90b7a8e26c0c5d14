"""Any OpenAI-compatible server: the config gives the argv template (`engine.command`).

Placeholders `{python}`, `{host}`, `{port}`, `{model}` and `{served_name}` are substituted in each
argv element; nothing is ever passed through a shell.
"""

from __future__ import annotations

from evalkit.config import EngineSettings
from evalkit.profiles import Launch, Profile


def no_flags(settings: EngineSettings, launch: Launch) -> list[str]:
    """The template carries everything; logical settings have no meaning here."""
    return []


PROFILE = Profile(name="command", entrypoint=(), flags=no_flags)


def render_template(template: list[str], launch: Launch) -> list[str]:
    """Substitute the launch placeholders in every element of an argv template."""
    values = {
        "python": launch.python,
        "host": launch.host,
        "port": str(launch.port),
        "model": launch.model,
        "served_name": launch.served_name,
    }
    out = []
    for part in template:
        for key, value in values.items():
            part = part.replace("{" + key + "}", value)
        out.append(part)
    return out
