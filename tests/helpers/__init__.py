"""What evalkit's tests share, one module each (docs/tests.md, "Writing a test", says which to use):

* `cli`: the CLI in this process (`evalkit_cli`, the default) or as its own process (`evalkit_process`);
* `sim`: the simulated engine in this process over ASGI (`simulator`, `asgi_server`) or as a
  process (`SimServer`, `running_sim`);
* `runs`: hand-made run folders (exact, cheap, hostile when asked) and the Markdown table reader;
* `git`: throwaway engine repositories with real git history for bisect and source trees;
* `gpus`: fake `nvidia-smi` / `amd-smi` on PATH;
* `lm_eval`: lm-eval's own CLI against a server, to hold evalkit's marks to it.

The fixtures that start processes (`sim_process`, `evalkit_process`, `engine_processes`,
`shared_sim`) live in tests/conftest.py, which sorts tests into tiers by them.
"""
