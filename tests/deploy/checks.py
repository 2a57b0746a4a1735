"""Static checks of the deployment files (docker-compose.yml, .env.example, deploy/).

Docker cannot run where the tests run, so these read the files instead: each check returns
the problems it finds as readable strings (empty: fine), which lets the tests run every
check on the real files and on deliberately broken copies.
"""

from __future__ import annotations

import configparser
import glob
import itertools
import json
import re
import shlex
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]

ONE_SHOT = "no"  # `restart: "no"` marks a one-shot service (runs, exits, dependents go on)


# -- settings ------------------------------------------------------------------------------


def settings_env_names() -> set[str]:
    """Every environment variable Spindle reads through pydantic-settings: the fields of
    backend.settings.Settings (SPINDLE_*) and of the object-store tier's own settings class
    (SPINDLE_S3_*, storage_engine.objstore.ObjectStoreSettings, which open_object_store()
    reads for s3:// URLs). Upper case: pydantic-settings matches names case-insensitively."""
    from backend.settings import Settings
    from storage_engine.objstore import ObjectStoreSettings

    names: set[str] = set()
    for cls in (Settings, ObjectStoreSettings):
        prefix = str(cls.model_config.get("env_prefix", ""))
        for name, field in cls.model_fields.items():
            alias = field.validation_alias
            names.add(alias.upper() if isinstance(alias, str) else (prefix + name).upper())
    return names


# -- compose files and interpolation -------------------------------------------------------


def load_compose(path: Path = ROOT / "docker-compose.yml") -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    assert isinstance(doc, dict), f"{path}: not a mapping"
    return doc


_VAR = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:?[-?+])?(?P<arg>[^}]*)\}"
    r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)


@dataclass(frozen=True)
class VarUse:
    name: str
    required: bool  # ${NAME:?message} or ${NAME?message}
    has_default: bool


def _strings(node: object) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, Mapping):
        for k, v in node.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)


def interpolated_vars(compose: Mapping[str, Any]) -> list[VarUse]:
    """Every ${NAME...} / $NAME that compose substitutes ($$ is a literal $)."""
    uses = []
    for s in _strings(compose):
        for m in _VAR.finditer(s):
            if m["escaped"]:
                continue
            name = m["braced"] or m["bare"]
            op = m["op"] or ""
            uses.append(VarUse(name, "?" in op, "-" in op))
    return uses


def interpolate(value: str, env: Mapping[str, str]) -> str:
    """Compose's substitution of `value` with `env` (defaults applied; a missing required
    variable raises KeyError)."""

    def sub(m: re.Match[str]) -> str:
        if m["escaped"]:
            return "$"
        name = m["braced"] or m["bare"]
        op, arg = m["op"] or "", m["arg"] or ""
        got = env.get(name)
        unset_or_empty = got is None or (op.startswith(":") and got == "")
        if op.endswith("-"):
            return arg if unset_or_empty else str(got)
        if op.endswith("?"):
            if unset_or_empty:
                raise KeyError(f"{name}: {arg}")
            return str(got)
        if op.endswith("+"):
            return "" if unset_or_empty else arg
        return got or ""

    return _VAR.sub(sub, value)


_ASSIGN = re.compile(r"^\s*(#\s*)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def env_file_assignments(text: str) -> dict[str, tuple[str, bool]]:
    """NAME -> (value, active) of a .env-style file; `# NAME=value` lines count as
    documented but inactive (commented-out examples)."""
    out: dict[str, tuple[str, bool]] = {}
    for line in text.splitlines():
        m = _ASSIGN.match(line)
        if m is None:
            continue
        active = m[1] is None
        name, value = m[2], m[3].strip()
        if name not in out or active:
            out[name] = (value, active)
    return out


def environment_of(service: Mapping[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        pairs = (item.split("=", 1) if "=" in item else (item, "") for item in env)
        return {k: v for k, v in pairs}
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def services(compose: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    svcs = compose.get("services")
    assert isinstance(svcs, dict), "compose file without services"
    return svcs


def is_one_shot(service: Mapping[str, Any]) -> bool:
    return str(service.get("restart", "")) == ONE_SHOT


# -- checks of the compose file ------------------------------------------------------------


def check_spindle_vars(
    compose: Mapping[str, Any], env_example: str, known: set[str] | None = None
) -> list[str]:
    """Every SPINDLE_* name in a service's environment, in compose's ${...} and in
    .env.example (commented examples too) is a setting Spindle reads."""
    known = settings_env_names() if known is None else known
    problems = []
    for name, svc in services(compose).items():
        for var in environment_of(svc):
            if var.upper().startswith("SPINDLE_") and var.upper() not in known:
                problems.append(f"service {name}: {var} is not a Spindle setting")
    for use in interpolated_vars(compose):
        if use.name.upper().startswith("SPINDLE_") and use.name.upper() not in known:
            problems.append(f"${{{use.name}}} is not a Spindle setting")
    for var in env_file_assignments(env_example):
        if var.upper().startswith("SPINDLE_") and var.upper() not in known:
            problems.append(f".env.example: {var} is not a Spindle setting")
    return sorted(set(problems))


def check_env_example_lists_vars(compose: Mapping[str, Any], env_example: str) -> list[str]:
    """Every variable compose substitutes is listed in .env.example; required ones
    (${X:?...}) with an active value, so `cp .env.example .env` gives a working file."""
    listed = env_file_assignments(env_example)
    problems = []
    for use in interpolated_vars(compose):
        if use.name not in listed:
            problems.append(f"${{{use.name}}} is used but not listed in .env.example")
        elif use.required and not listed[use.name][1]:
            problems.append(f"${{{use.name}}} is required but commented out in .env.example")
    return sorted(set(problems))


def example_env(env_example: str) -> dict[str, str]:
    return {k: v for k, (v, active) in env_file_assignments(env_example).items() if active}


def check_builds(compose: Mapping[str, Any], root: Path = ROOT) -> list[str]:
    problems = []
    for name, svc in services(compose).items():
        build = svc.get("build")
        if build is None:
            if "image" not in svc:
                problems.append(f"service {name}: neither image nor build")
            continue
        if isinstance(build, str):
            build = {"context": build}
        context = root / str(build.get("context", "."))
        if not context.is_dir():
            problems.append(f"service {name}: build context {context} does not exist")
            continue
        dockerfile = context / str(build.get("dockerfile", "Dockerfile"))
        if not dockerfile.is_file():
            problems.append(f"service {name}: dockerfile {dockerfile} does not exist")
    return problems


def dockerfiles(compose: Mapping[str, Any], root: Path = ROOT) -> set[tuple[Path, Path]]:
    """(context, dockerfile) of every service built from source."""
    out = set()
    for svc in services(compose).values():
        build = svc.get("build")
        if build is None:
            continue
        if isinstance(build, str):
            build = {"context": build}
        context = (root / str(build.get("context", "."))).resolve()
        out.add((context, context / str(build.get("dockerfile", "Dockerfile"))))
    return out


@dataclass(frozen=True)
class HostPort:
    service: str
    ip: str
    port: int
    protocol: str


def _host_ports(name: str, svc: Mapping[str, Any], env: Mapping[str, str]) -> list[HostPort]:
    out = []
    for spec in svc.get("ports") or []:
        if isinstance(spec, Mapping):
            published = spec.get("published")
            if published is None:
                continue
            ip = str(spec.get("host_ip", ""))
            proto = str(spec.get("protocol", "tcp"))
            port_s = interpolate(str(published), env)
        else:
            text = interpolate(str(spec), env)
            text, _, proto = text.partition("/")
            parts = text.rsplit(":", 2)
            if len(parts) == 1:
                continue  # container port only: Docker picks an ephemeral host port
            ip = parts[0] if len(parts) == 3 else ""
            port_s = parts[-2]
            proto = proto or "tcp"
        for port in _port_range(port_s):
            out.append(HostPort(name, ip.strip("[]"), port, proto))
    return out


def _port_range(text: str) -> range:
    lo, _, hi = text.partition("-")
    return range(int(lo), int(hi or lo) + 1)


def check_host_ports(compose: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """No two services (whatever their profiles) publish the same host port."""
    wildcard = {"", "0.0.0.0", "::"}
    seen: list[HostPort] = []
    problems = []
    for name, svc in services(compose).items():
        for hp in _host_ports(name, svc, env):
            for other in seen:
                same_ip = hp.ip == other.ip or hp.ip in wildcard or other.ip in wildcard
                if hp.port == other.port and hp.protocol == other.protocol and same_ip:
                    problems.append(
                        f"host port {hp.port}/{hp.protocol} published by both "
                        f"{other.service} and {hp.service}"
                    )
            seen.append(hp)
    return problems


def _depends(svc: Mapping[str, Any]) -> dict[str, str]:
    deps = svc.get("depends_on") or {}
    if isinstance(deps, list):
        return {str(d): "service_started" for d in deps}
    return {str(k): str((v or {}).get("condition", "service_started")) for k, v in deps.items()}


def check_depends_on(compose: Mapping[str, Any]) -> list[str]:
    """Every dependency exists; waiting for health needs a healthcheck; waiting for
    completion needs a one-shot service."""
    svcs = services(compose)
    problems = []
    for name, svc in svcs.items():
        for dep, condition in _depends(svc).items():
            target = svcs.get(dep)
            if target is None:
                problems.append(f"service {name} depends on unknown service {dep}")
                continue
            if condition == "service_healthy" and "healthcheck" not in target:
                problems.append(f"service {name} waits for {dep} to be healthy: no healthcheck")
            if condition == "service_completed_successfully" and not is_one_shot(target):
                problems.append(f"service {name} waits for {dep} to complete: not a one-shot")
            if is_one_shot(target) and condition != "service_completed_successfully":
                problems.append(
                    f"service {name} depends on one-shot {dep} without "
                    "condition: service_completed_successfully"
                )
            own = set(svc.get("profiles") or [])
            theirs = set(target.get("profiles") or [])
            if theirs and not theirs & own:
                problems.append(f"service {name} depends on {dep}, which only runs in {theirs}")
    return problems


def check_volumes(compose: Mapping[str, Any]) -> list[str]:
    declared = set((compose.get("volumes") or {}).keys())
    problems = []
    used = set()
    for name, svc in services(compose).items():
        for vol in svc.get("volumes") or []:
            if isinstance(vol, Mapping):
                if vol.get("type", "volume") != "volume" or not vol.get("source"):
                    continue
                source = str(vol["source"])
            else:
                source = str(vol).split(":", 1)[0]
                if ":" not in str(vol) or source.startswith((".", "/", "~", "$")):
                    continue  # anonymous volume or bind mount
            used.add(source)
            if source not in declared:
                problems.append(f"service {name} uses undeclared volume {source}")
    for unused in sorted(declared - used):
        problems.append(f"volume {unused} is declared but never used")
    return problems


def check_healthchecks(compose: Mapping[str, Any]) -> list[str]:
    problems = []
    for name, svc in services(compose).items():
        if is_one_shot(svc):
            continue
        hc = svc.get("healthcheck")
        if not hc or hc.get("disable") or not hc.get("test"):
            problems.append(f"long-running service {name} has no healthcheck")
    return problems


def check_users(compose: Mapping[str, Any]) -> list[str]:
    """No service overrides its image's user with root."""
    problems = []
    for name, svc in services(compose).items():
        user = svc.get("user")
        if user is not None and _is_root(str(user)):
            problems.append(f"service {name} runs as root (user: {user})")
    return problems


def _is_root(user: str) -> bool:
    return user.split(":", 1)[0].strip() in ("root", "0", "")


# -- Dockerfiles and .dockerignore ---------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions with continuation lines joined (comments and blank lines dropped)."""
    out: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # comment lines inside a continued instruction are dropped
        if not pending:
            start = i
        if line.endswith("\\"):
            pending.append(line[:-1])
            continue
        pending.append(line)
        joined = " ".join(p.strip() for p in pending if p.strip())
        keyword, _, args = joined.partition(" ")
        out.append(Instruction(keyword.upper(), args.strip(), start))
        pending = []
    return out


def final_stage(instructions: list[Instruction]) -> list[Instruction]:
    starts = [i for i, ins in enumerate(instructions) if ins.keyword == "FROM"]
    return instructions[starts[-1] :] if starts else instructions


def copy_sources(ins: Instruction) -> tuple[list[str], bool]:
    """(sources, from_build_context) of a COPY/ADD."""
    args = ins.args
    flags = []
    while args.startswith("--"):
        flag, _, args = args.partition(" ")
        flags.append(flag)
        args = args.strip()
    from_context = not any(f.startswith("--from") for f in flags)
    json_form = args.startswith("[")
    parts = [str(p) for p in json.loads(args)] if json_form else shlex.split(args)
    return parts[:-1], from_context


def _glob_regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif c == "*":
            out += "[^/]*"
            i += 1
        elif c == "?":
            out += "[^/]"
            i += 1
        elif c == "[":
            end = pattern.find("]", i)
            out += pattern[i : end + 1] if end > i else re.escape(c)
            i = end + 1 if end > i else i + 1
        else:
            out += re.escape(c)
            i += 1
    return re.compile(out + r"\Z")


def dockerignore_patterns(text: str) -> list[tuple[re.Pattern[str], bool]]:
    """(pattern, is_exception) in order; patterns are anchored at the context root."""
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        line = line.lstrip("!").strip().lstrip("/").rstrip("/")
        if line:
            out.append((_glob_regex(line), negate))
    return out


def is_ignored(path: str, patterns: list[tuple[re.Pattern[str], bool]]) -> bool:
    """Whether Docker leaves `path` (relative to the context) out: the last pattern that
    matches it or one of its parent directories decides."""
    parts = path.strip("/").split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for regex, negate in patterns:
        if any(regex.match(c) for c in candidates):
            ignored = not negate
    return ignored


def check_dockerfile(dockerfile: Path, context: Path, dockerignore: str | None = None) -> list[str]:
    """Every file COPY'd from the context exists and is not left out by .dockerignore;
    the final stage runs as a user other than root."""
    if dockerignore is None:
        ignore_file = context / ".dockerignore"
        dockerignore = ignore_file.read_text() if ignore_file.is_file() else ""
    patterns = dockerignore_patterns(dockerignore)
    instructions = parse_dockerfile(dockerfile.read_text())
    problems = []
    where = dockerfile.name
    for ins in instructions:
        if ins.keyword not in ("COPY", "ADD"):
            continue
        sources, from_context = copy_sources(ins)
        if not from_context:
            continue
        for src in sources:
            if re.match(r"^[a-z]+://", src):
                continue  # ADD of a URL
            rel = src.lstrip("/").rstrip("/") or "."
            matches = glob.glob(str(context / rel)) if any(c in rel for c in "*?[") else []
            if not matches and not (context / rel).exists():
                problems.append(f"{where}:{ins.line}: COPY source {src} does not exist")
            elif rel != "." and is_ignored(rel, patterns):
                problems.append(f"{where}:{ins.line}: COPY source {src} is in .dockerignore")
    users = [ins for ins in final_stage(instructions) if ins.keyword == "USER"]
    if not users:
        problems.append(f"{where}: no USER in the final stage (the image would run as root)")
    elif _is_root(users[-1].args):
        problems.append(f"{where}:{users[-1].line}: the final stage runs as root")
    return problems


# -- nginx ---------------------------------------------------------------------------------


def nginx_locations(conf: str) -> dict[str, str]:
    """location (modifier and path, as written) -> its block's text."""
    out = {}
    for m in re.finditer(r"location\s+([^{]+?)\s*\{", conf):
        depth, i = 1, m.end()
        while depth and i < len(conf):
            depth += {"{": 1, "}": -1}.get(conf[i], 0)
            i += 1
        out[m[1].strip()] = conf[m.end() : i - 1]
    return out


def nginx_upstream(block: str, conf: str) -> str | None:
    """host:port a block proxies to, following `set $var ...;`."""
    m = re.search(r"^\s*proxy_pass\s+([^;\s]+)\s*;", block, re.M)
    if m is None:
        return None
    target = m[1]
    if target.startswith("$"):
        s = re.search(r"^\s*set\s+\$" + re.escape(target[1:]) + r"\s+([^;\s]+)\s*;", conf, re.M)
        if s is None:
            return None
        target = s[1]
    u = re.match(r"^https?://([^/:]+)(?::(\d+))?", target)
    if u is None:
        return None
    return f"{u[1]}:{u[2] or '80'}"


def api_port(svc: Mapping[str, Any]) -> str | None:
    """The port the API service listens on: its command's --port."""
    cmd = svc.get("command") or []
    cmd = shlex.split(cmd) if isinstance(cmd, str) else [str(c) for c in cmd]
    for flag, value in itertools.pairwise(cmd):
        if flag == "--port":
            return value
    return None


def check_nginx(conf: str, compose: Mapping[str, Any], api_service: str = "api") -> list[str]:
    """/api (and the health, metrics and SSE routes) go to the API service's name and
    port; the SSE route is not buffered."""
    svcs = services(compose)
    api = svcs.get(api_service)
    if api is None:
        return [f"compose has no service {api_service}"]
    port = api_port(api)
    want = f"{api_service}:{port}"
    problems = []
    exposed = {str(p) for p in api.get("expose") or []}
    if port is None:
        problems.append(f"service {api_service}: no --port in its command")
    elif exposed and port not in exposed:
        problems.append(f"service {api_service} listens on {port} but exposes {exposed}")
    locations = nginx_locations(conf)
    routes = {
        "/api": next((b for k, b in locations.items() if k in ("/api/", "/api")), None),
        "/healthz": locations.get("= /healthz"),
        "/readyz": locations.get("= /readyz"),
        "/metrics": locations.get("= /metrics"),
    }
    sse = next((b for k, b in locations.items() if "metrics/stream" in k), None)
    routes["metrics stream"] = sse
    for route, block in routes.items():
        if block is None:
            problems.append(f"nginx: no location for {route}")
            continue
        got = nginx_upstream(block, conf)
        if got != want:
            problems.append(f"nginx: {route} proxies to {got}, not {want}")
    if sse is not None and not re.search(r"^\s*proxy_buffering\s+off\s*;", sse, re.M):
        problems.append("nginx: the metrics stream location does not set proxy_buffering off")
    return problems


# -- systemd units -------------------------------------------------------------------------


def read_unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text())
    return parser


def unit_command(value: str) -> list[str]:
    """An Exec*= line as argv, with systemd's %% escape undone."""
    return [a.replace("%%", "%") for a in shlex.split(value.lstrip("-@:+!"))]


def check_unit(path: Path) -> list[str]:
    unit = read_unit(path)
    problems = []
    if not unit.has_section("Service"):
        return [f"{path.name}: no [Service] section"]
    svc = unit["Service"]
    user = svc.get("User")
    if user is None or _is_root(user):
        problems.append(f"{path.name}: runs as root (set User=)")
    for key in ("ExecStartPre", "ExecStart"):
        if key in svc:
            argv = unit_command(svc[key])
            if not argv or not argv[0].startswith("/"):
                problems.append(f"{path.name}: {key} is not an absolute command: {svc[key]}")
    return problems


def python_module_args(argv: Iterable[str]) -> list[str]:
    """The `-m module args...` part of a python command line ([] if there is none)."""
    argv = list(argv)
    if "-m" not in argv:
        return []
    return argv[argv.index("-m") + 1 :]
