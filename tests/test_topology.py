"""A cell is a topology of parts: how a config declares one, the cells it expands to, each part's
launch as every engine spells it (ports pinned, nodes placed), the twin of a PD cell, and what
`evalkit plan` prints of it. All in this process: nothing is started."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalkit.config import MatrixConfig, parse_config
from evalkit.config.cells import expand, topology_axis, twin_axes, twin_rule, twin_word
from evalkit.engine.placement import Node, Placement
from evalkit.engine.ports import PortBook
from evalkit.engine.topology import TopologyLaunch, book_ports, build_topology_launch, plan_ports
from evalkit.errors import ConfigError
from tests.helpers.cli import evalkit_cli

BASE: dict[str, Any] = {"model": "m", "engine": {"profile": "sim", "settings": {"tensor_parallel": 4}}}
TP_MISMATCH = {"topology": {"pd": {"prefill": {"settings": {"tensor_parallel": 8}},
                                   "decode": {"settings": {"tensor_parallel": 4}}}}}


def config(axes: dict[str, Any], profile: str = "sim", **more: Any) -> MatrixConfig:
    return parse_config({**BASE, "engine": {**BASE["engine"], "profile": profile}, "axes": axes, **more}, "t.yaml")


def launch_of(cfg: MatrixConfig, cell_id: str, **kw: Any) -> TopologyLaunch:
    cell = next(c for c in expand(cfg) if c.id == cell_id)
    return build_topology_launch(cfg, cell, kw.pop("ports", plan_ports), **kw)


def argv(launch: TopologyLaunch, part: str) -> list[str]:
    return launch.part(part).launch.argv


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_a_disagg_list_is_one_engine_and_a_prefill_decode_pair_behind_a_router() -> None:
    off, pd = expand(config({"disagg": ["off", "1p1d"]}))
    assert (off.id, [p.name for p in off.topology.parts]) == ("off", ["engine"])
    assert pd.id == "1p1d" and [p.name for p in pd.topology.parts] == ["prefill0", "decode0", "router"]
    assert [[p.name for p in wave] for wave in pd.topology.waves] == [["prefill0", "decode0"], ["router"]]
    assert pd.topology.front.name == "router" and pd.topology.devices == 8  # two TP-4 workers, a router of none


def test_a_role_overrides_the_cells_settings_and_a_cell_without_topology_is_unchanged() -> None:
    (cell,) = expand(config({"disagg": {"mix": TP_MISMATCH}}))
    prefill, decode, _ = cell.topology.parts
    assert (prefill.settings.tensor_parallel, decode.settings.tensor_parallel, cell.topology.devices) == (8, 4, 12)
    (plain,) = expand(config({"tp": {"tp2": {"settings": {"tensor_parallel": 2}}}}))
    assert plain.topology_spec is None and plain.topology.kind == "single" and plain.topology.devices == 2


def test_a_pd_cells_twin_is_its_aggregated_cell_and_a_fix_off_cell_keeps_its_fix_on_twin() -> None:
    cfg = config({"disagg": {"off": {"topology": "off"}, "1p1d": {"topology": "1p1d"}, "mix": TP_MISMATCH}})
    assert topology_axis(cfg) == ("disagg", "off")
    assert twin_axes({"disagg": "mix"}, cfg) == {"disagg": "off"} and twin_axes({"disagg": "off"}, cfg) is None
    both = config({"disagg": ["off", "1p1d"], "fix": {"on": {"args": ["--a"]}, "off": {"args": ["--b"]}}},
                  ab={"axis": "fix", "on": "on", "off": "off"})
    assert twin_axes({"disagg": "1p1d", "fix": "off"}, both) == {"disagg": "1p1d", "fix": "on"}
    assert twin_axes({"disagg": "1p1d", "fix": "on"}, both) == {"disagg": "off", "fix": "on"}


@pytest.mark.parametrize(("axes", "words"), [
    ({"d": {"x": {"topology": "3q"}}}, "axes.d.x.topology: '3q' is not a topology"),
    ({"d": {"x": {"topology": {"pd": {"decode": {"node": 1}}}}}}, "decode.node: node 1 is not one of the 1 node(s)"),
    ({"d": {"x": {"topology": {"pd": {}, "ranks": 2}}}}, "pd and ranks cannot be combined"),
    ({"d": {"x": {"topology": {"ranks": 1}}}}, "axes.d.x.topology.ranks: Input should be greater than or equal to 2"),
    ({"d": ["1p1d"], "e": ["2p1d"]}, "axes.e.2p1d.topology: axis d also sets the topology"),
])
def test_a_bad_topology_is_one_line_naming_its_field(axes: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError) as raised:
        expand(config(axes))
    assert words in str(raised.value) and "\n" not in str(raised.value)


def test_the_simulator_spells_atoms_workers_its_router_and_vllms_ranks() -> None:
    launch = launch_of(config({"disagg": {"mix": TP_MISMATCH}}), "mix")
    prefill, decode, router = argv(launch, "prefill0"), argv(launch, "decode0"), argv(launch, "router")
    assert prefill[1:3] == ["-m", "evalkit.sim"] and flag(prefill, "-tp") == "8" and flag(decode, "-tp") == "4"
    assert '"kv_role":"kv_producer"' in flag(prefill, "--kv-transfer-config")
    assert '"kv_role":"kv_consumer"' in flag(decode, "--kv-transfer-config")
    assert router[1:3] == ["-m", "evalkit.sim.router"] and "--pd-disaggregation" in router
    assert flag(router, "--prefill") == "http://127.0.0.1:<prefill0.http>"
    assert flag(router, "--decode") == "http://127.0.0.1:<decode0.http>"
    ranks = launch_of(config({"n": {"two": {"topology": {"ranks": 2}}}}), "two")
    rank0, rank1 = argv(ranks, "rank0"), argv(ranks, "rank1")
    assert flag(rank1, "--node-rank") == "1" and flag(rank1, "--master-port") == "<rank0.master>" and "--headless" in rank1
    assert flag(rank0, "--nnodes") == "2" and "--headless" not in rank0
    assert [p.readiness for p in ranks.parts] == ["serve", "alive"] and ranks.front.name == "rank0"


def test_atom_spells_mooncake_workers_and_atomesh_and_has_no_ranks() -> None:
    launch = launch_of(config({"d": ["1p1d"]}, profile="atom"), "1p1d")
    assert argv(launch, "router")[:2] == ["atomesh", "launch"]
    assert flag(argv(launch, "router"), "--prometheus-port") == "<router.prometheus>"
    assert '"kv_connector":"mooncake"' in flag(argv(launch, "prefill0"), "--kv-transfer-config")
    with pytest.raises(ConfigError, match="profile atom has no spelling of an engine across nodes"):
        launch_of(config({"n": {"two": {"topology": {"ranks": 2}}}}, profile="atom"), "two")


def test_vllm_runs_other_ranks_headless_through_serve_and_needs_a_router_command() -> None:
    ranks = launch_of(config({"n": {"two": {"topology": {"ranks": 2}}}}, profile="vllm"), "two")
    assert argv(ranks, "rank1")[1:5] == ["-m", "vllm.entrypoints.cli.main", "serve", "--model"]
    assert argv(ranks, "rank0")[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    with pytest.raises(ConfigError, match="topology.pd.router.command: profile vllm ships no PD router"):
        launch_of(config({"d": ["1p1d"]}, profile="vllm"), "1p1d")
    proxy = {"topology": {"pd": {"router": {"command": ["proxy", "--port", "{port}", "--prefill", "{prefill}"]}}}}
    launch = launch_of(config({"d": {"pd": proxy}}, profile="vllm"), "pd")
    assert argv(launch, "router") == ["proxy", "--port", "<router.http>", "--prefill", "http://127.0.0.1:<prefill0.http>"]
    ours = {"topology": {"pd": {"router": {"command": ["{evalkit_python}", "-m", "evalkit.sim.router"]}}}}
    venv = {"profile": "vllm", "python": "/venv/bin/python"}
    launch = launch_of(parse_config({**BASE, "engine": venv, "axes": {"d": {"pd": ours}}}, "t.yaml"), "pd")
    assert argv(launch, "router")[0] == sys.executable and argv(launch, "prefill0")[0] == "/venv/bin/python"


def test_a_vllm_roles_own_kv_transfer_config_is_the_one_it_runs_with() -> None:
    mine = '{"kv_connector":"ExampleConnector","kv_role":"kv_producer"}'
    pd = {"pd": {"prefill": {"args": ["--kv-transfer-config", mine]}, "router": {"command": ["proxy"]}}}
    launch = launch_of(config({"d": {"pd": {"topology": pd}}}, profile="vllm"), "pd")
    assert [a for a in argv(launch, "prefill0") if "kv_connector" in a] == [mine]  # vLLM takes the last one
    assert '"kv_connector":"NixlConnector","kv_role":"kv_consumer"' in flag(argv(launch, "decode0"), "--kv-transfer-config")


def test_sglang_spells_disaggregation_mode_bootstrap_ports_and_dist_init() -> None:
    launch = launch_of(config({"d": ["1p1d"]}, profile="sglang"), "1p1d")
    assert flag(argv(launch, "prefill0"), "--disaggregation-mode") == "prefill"
    assert flag(argv(launch, "decode0"), "--disaggregation-bootstrap-port") == "<decode0.bootstrap>"
    assert argv(launch, "router")[1:4] == ["-m", "sglang_router.launch_router", "--pd-disaggregation"]
    ranks = launch_of(config({"n": {"two": {"topology": {"ranks": 2}}}}, profile="sglang"), "two")
    assert flag(argv(ranks, "rank1"), "--dist-init-addr") == "127.0.0.1:<rank0.master>"


def test_every_port_of_every_part_is_pinned_and_none_is_given_twice() -> None:
    launch = launch_of(config({"d": ["2p1d"]}, profile="sglang"), "2p1d", ports=book_ports(PortBook()))
    given = [port for p in launch.parts for port in (p.launch.port, *p.ports.values())]
    assert all(isinstance(port, int) for port in given) and len(set(given)) == len(given) == 7
    router = argv(launch, "router")
    assert [router[i + 1] for i, a in enumerate(router) if a == "--prefill"] == [
        f"http://127.0.0.1:{launch.part(name).launch.port}" for name in ("prefill0", "prefill1")]


def test_a_placement_puts_each_part_on_its_node_and_starts_it_there() -> None:
    cfg = config({"d": {"pd": {"topology": {"pd": {"nodes": 2}}}}})
    placement = Placement((Node("n1", "10.0.0.1"), Node("n2", "10.0.0.2")),
                          launcher=lambda part, node, args: ["srun", f"--nodelist={node.name}", *args], kind="slurm")
    launch = launch_of(cfg, "pd", placement=placement)
    decode = launch.part("decode0")
    assert (decode.part.node, decode.node_name, decode.launch.host) == (1, "n2", "10.0.0.2")
    assert flag(argv(launch, "router"), "--decode") == "http://10.0.0.2:<decode0.http>"
    assert decode.start[:2] == ("srun", "--nodelist=n2") and list(decode.start[2:]) == decode.launch.argv
    shown = decode.display([])
    assert shown["node_name"] == "n2" and shown["start"][:2] == ["srun", "--nodelist=n2"]


def test_plan_prints_each_parts_node_port_and_argv_in_start_order(tmp_path: Path) -> None:
    path = tmp_path / "pd.yaml"
    path.write_text(yaml.safe_dump({**BASE, "axes": {"disagg": {"off": {"topology": "off"}, "mix": TP_MISMATCH}}}))
    done = evalkit_cli("plan", "--config", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    mix = done.stdout.split("[mix]")[1]
    heads = [line.strip() for line in mix.splitlines() if line.startswith("  [")]
    assert [h.split("]")[0] for h in heads] == ["[prefill0", "[decode0", "[router"]
    assert heads == ["[prefill0] node 0, wave 1, ready at /health", "[decode0] node 0, wave 1, ready at /health",
                     "[router] node 0, wave 2, ready when it serves a completion"]
    assert "    ports: http <prefill0.http>, handshake <prefill0.handshake>" in mix.splitlines()
    router_argv = next(line for line in mix.splitlines() if "evalkit.sim.router" in line)
    assert shlex.split(router_argv.split("argv:  ")[1])[-1] == "http://127.0.0.1:<decode0.http>"
    off = done.stdout.split("[off]")[1].split("[mix]")[0]
    assert "  argv:   " in off and "parts:" not in off  # an ordinary cell prints as it always did


def test_a_pd_cells_twin_is_named_the_aggregated_twin_and_the_summary_says_which_value_it_is() -> None:
    cfg = config({"disagg": ["off", "1p1d"]})
    assert twin_word({"disagg": "1p1d"}, cfg) == "aggregated twin" and twin_rule(cfg) == {"axis": "disagg", "on": "off"}
    fixed = config({"fix": {"on": {"args": ["--a"]}, "off": {"args": ["--b"]}}}, ab={"axis": "fix", "on": "on", "off": "off"})
    assert twin_word({"fix": "off"}, fixed) == "fix-on twin" and twin_rule(fixed) == {"axis": "fix", "on": "on", "off": "off"}


def test_ranks_share_the_engines_devices_and_must_divide_them() -> None:
    (two,) = expand(config({"n": {"two": {"topology": {"ranks": 2}}}}))
    assert [p.devices for p in two.topology.parts] == [2, 2]  # TP 4 over two nodes
    (three,) = expand(config({"n": {"three": {"topology": {"ranks": 3}}}}))
    with pytest.raises(ConfigError, match=r"^cell three: topology.ranks: 3 nodes do not evenly divide the engine's 4 dev"):
        assert three.topology.devices


@pytest.mark.parametrize("command", ["plan", "matrix"])
def test_a_topology_the_engine_cannot_spell_is_bad_input_before_anything_starts(tmp_path: Path, command: str) -> None:
    path = tmp_path / "atom-ranks.yaml"
    atom = {**BASE["engine"], "profile": "atom"}
    path.write_text(yaml.safe_dump({**BASE, "engine": atom, "axes": {"n": {"two": {"topology": {"ranks": 2}}}}}))
    done = evalkit_cli(command, "--config", str(path), "--results-dir", str(tmp_path / "results"), cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "cell two: profile atom has no spelling of an engine across nodes" in done.stderr
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("cell.json"))


def test_a_topology_cells_recorded_front_argv_is_the_same_from_run_to_run() -> None:
    cfg = config({"d": ["1p1d"]})
    first, second = (launch_of(cfg, "1p1d", ports=book_ports(PortBook())).display([]) for _ in range(2))
    assert first["argv"] == second["argv"] and first["parts"] != second["parts"]  # the parts keep their real ports
    assert flag(first["argv"], "--prefill") == "http://127.0.0.1:<prefill0.http>"
    assert flag(first["argv"], "--port") == "<router.http>"
