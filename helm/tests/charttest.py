#!/usr/bin/env python3
"""The charts' test suite: renders every chart with every values set under
helm/tests/values/ and checks what it renders.

    charttest.py [--yarilo BIN] CHECK...

Checks (each one a test of `cargo nextest`, crates/yarilo/tests/helm.rs):

  lint        helm lint --strict, every chart × values set
  kubernetes  every object against the Kubernetes schemas of three minor
              versions, unknown fields refused (kubernetes-validate), and
              the cert-manager / Prometheus objects against tests/crd-schemas.json
  configs     every rendered yarilo.yaml through `yarilo config check`
              (with each container's environment, secrets stubbed)
  commands    every container runs a real yarilo subcommand on the file
              its pod mounts
  ports       every Service target port and probe port is one the container's
              rendered configuration listens on
  unit        assertions on the rendered objects, and the cases that must
              refuse to render
  generated   values.schema.json, README.md, the common values blocks and
              the config schema (from `yarilo config dump`) are what
              helm/tools/chartgen.py makes; every limits.cpu says whether it
              was measured
  counts      prints the number of objects per chart and values set

A missing prerequisite (helm, kubernetes-validate, the yarilo binary) fails
with the command that installs it; nothing is skipped.
"""

import argparse
import copy
import functools
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

HELM_DIR = Path(__file__).resolve().parent.parent
TESTS = HELM_DIR / "tests"
CHARTS = ["yarilo-shared", "yarilo-director", "yarilo-backend", "yarilo-standalone"]
HELM_VERSION = "v4.1.4"
K8S_VERSIONS = ["1.35.0", "1.36.0", "1.37.0"]
CONFIG_PATH = "/etc/yarilo/config/yarilo.yaml"
SETUP = "run scripts/setup-dev"

try:
    import yaml
except ImportError:  # pragma: no cover
    sys.exit(f"python3 yaml module missing: {SETUP}")


class Failure(Exception):
    pass


def fail(msg):
    raise Failure(msg)


# --------------------------------------------------------------- rendering


def helm(*args, check=True):
    try:
        p = subprocess.run(["helm", *args], capture_output=True, text=True)
    except FileNotFoundError:
        sys.exit(f"helm is not installed: {SETUP}")
    # Helm notes the charts/yarilo-lib symlink at INFO level; that is expected.
    err = "\n".join(l for l in p.stderr.splitlines() if "found symbolic link" not in l)
    if check and p.returncode != 0:
        fail(f"helm {' '.join(args)} failed:\n{err}{p.stdout[-2000:]}")
    return p.returncode, p.stdout, err


@functools.lru_cache(maxsize=None)
def check_helm_version():
    _, out, _ = helm("version", "--short")
    if not out.startswith(HELM_VERSION):
        sys.exit(f"helm {out.strip()} found, {HELM_VERSION} pinned: {SETUP}")


def cases():
    """(chart, case, values file) for every values set."""
    out = []
    for chart in CHARTS:
        for f in sorted((TESTS / "values" / chart).glob("*.yaml")):
            out.append((chart, f.stem, f))
    return out


@functools.lru_cache(maxsize=None)
def render(chart, values_file, *sets):
    check_helm_version()
    args = ["template", "test", str(HELM_DIR / chart), "--namespace", "mail"]
    if values_file:
        args += ["-f", str(values_file)]
    for s in sets:
        args += ["--set", s]
    _, out, _ = helm(*args)
    return [d for d in yaml.safe_load_all(out) if d]


def render_fails(chart, values, expect):
    """Renders with `values` (a dict) and asserts helm refuses with `expect` in the message."""
    check_helm_version()
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump(values, f)
        f.flush()
        rc, out, err = helm("template", "test", str(HELM_DIR / chart), "-f", f.name, check=False)
    if rc == 0:
        fail(f"{chart} rendered with {values}, but must refuse ({expect!r})")
    if expect not in err:
        fail(f"{chart} refused {values} for another reason than {expect!r}:\n{err}")


def all_renders():
    return [(chart, case, render(chart, f)) for chart, case, f in cases()]


def pods(objs):
    """(workload object, pod spec) of every workload."""
    for o in objs:
        if o["kind"] in ("Deployment", "StatefulSet"):
            yield o, o["spec"]["template"]["spec"]


def by_kind(objs, kind):
    return [o for o in objs if o["kind"] == kind]


def named(objs, kind, name):
    for o in objs:
        if o["kind"] == kind and o["metadata"]["name"] == name:
            return o
    fail(f"no {kind} {name}; have {[o['metadata']['name'] for o in by_kind(objs, kind)]}")


def config_of(objs, pod):
    """The yarilo.yaml text the pod mounts at /etc/yarilo/config."""
    for v in pod.get("volumes", []):
        if v["name"] == "config":
            cm = named(objs, "ConfigMap", v["configMap"]["name"])
            return cm["data"]["yarilo.yaml"]
    return None


def is_yarilo(container):
    return container.get("command", [None])[0] == "yarilo"


@functools.lru_cache(maxsize=None)
def stub_secrets():
    return yaml.safe_load((TESTS / "stub-secrets.yaml").read_text())


def secret_value(objs, ref):
    """A secretKeyRef's value: from a Secret the chart renders, else from tests/stub-secrets.yaml."""
    import base64

    for o in objs:
        if o["kind"] == "Secret" and o["metadata"]["name"] == ref["name"]:
            if ref["key"] in o.get("stringData", {}):
                return o["stringData"][ref["key"]]
            if ref["key"] in o.get("data", {}):
                return base64.b64decode(o["data"][ref["key"]]).decode()
            fail(f"Secret {ref['name']} has no key {ref['key']}")
    stub = stub_secrets().get(f"{ref['name']}/{ref['key']}")
    if stub is None:
        fail(f"secretKeyRef {ref['name']}/{ref['key']} is neither rendered nor in tests/stub-secrets.yaml")
    return stub


def container_env(container, objs=()):
    """The environment Kubernetes would give the container."""
    env = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), e["value"])
        elif "secretKeyRef" in e.get("valueFrom", {}):
            env[e["name"]] = secret_value(objs, e["valueFrom"]["secretKeyRef"])
        elif "fieldRef" in e.get("valueFrom", {}):
            env[e["name"]] = "10.1.2.3"
        else:
            fail(f"container {container['name']}: env {e['name']} has neither value nor a known valueFrom")
    return env


# ----------------------------------------------------------------- the binary


def yarilo(args, cmd, env=None, check=True):
    if not args.yarilo or not Path(args.yarilo).exists():
        sys.exit("--yarilo BIN: the yarilo binary is required (cargo build -p yarilo)")
    e = {k: v for k, v in os.environ.items() if not k.startswith("YARILO_")}
    e.update(env or {})
    p = subprocess.run([args.yarilo, *cmd], capture_output=True, text=True, env=e)
    if check and p.returncode != 0:
        fail(f"yarilo {' '.join(cmd)} exited {p.returncode}:\n{p.stderr}{p.stdout}")
    return p


@functools.lru_cache(maxsize=None)
def subcommands(binary):
    p = subprocess.run([binary, "--help"], capture_output=True, text=True)
    subs, inside = set(), False
    for line in p.stdout.splitlines():
        if line.strip() == "Commands:":
            inside = True
            continue
        if inside:
            m = re.match(r"^  (\S+)\s", line)
            if not m:
                break
            subs.add(m.group(1))
    subs -= {"help", "config", "single"}
    if "imap" not in subs:
        fail(f"could not read the subcommands from `yarilo --help`:\n{p.stdout}")
    return subs


def effective_config(args, text, env):
    """`yarilo config dump` of a rendered file (every default filled in)."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(text)
        f.flush()
        yarilo(args, ["config", "check", "--config", f.name], env)
        dump = yarilo(args, ["config", "dump", "--config", f.name], env)
    return yaml.safe_load(dump.stdout)


def listen_port(addr):
    m = re.match(r"^.*:(\d+)$", addr or "")
    return int(m.group(1)) if m else None


def listened_ports(cfg, command, env):
    """The TCP ports `yarilo <command>` binds with this effective config."""
    ports = set()
    telemetry = env.get("TELEMETRY_LISTEN", cfg["telemetry"]["listen"])
    if listen_port(telemetry):
        ports.add(listen_port(telemetry))
    svc = cfg["services"]
    logins = {
        "imap-login": ["imap", "imaps"],
        "pop3-login": ["pop3", "pop3s"],
        "submission-login": ["submission", "submissions"],
        "lmtp-login": ["lmtp"],
    }
    if command in logins:
        ports |= {svc[s]["port"] for s in logins[command] if svc[s]["enabled"]}
    elif command in ("imap", "pop3", "submission", "lmtp"):
        ports.add(svc[command]["port"])  # the hop listener ignores `enabled`
    elif command == "auth":
        ports.add(listen_port(cfg["auth_service"]["listen"]))
    elif command == "warden":
        ports.add(listen_port(cfg["warden_service"]["listen"]))
    elif command == "locks":
        if cfg["locks_service"]["mode"] == "remote":
            ports.add(listen_port(cfg["locks_service"]["listen"]))
    elif command == "director":
        ports.add(listen_port(cfg["director_service"]["listen"]))
        if cfg["director_service"]["api"]["listen"]:
            ports.add(listen_port(cfg["director_service"]["api"]["listen"]))
    elif command == "quota-status":
        ports.add(listen_port(cfg["quota_status"]["listen"]))
    elif command == "backend-reg":
        pass
    else:
        fail(f"listened_ports does not know `yarilo {command}`: teach it (helm/tests/charttest.py)")
    return ports


# ------------------------------------------------------------------ checks


def check_lint(args):
    n = 0
    for chart, case, f in cases():
        rc, out, err = helm("lint", "--strict", str(HELM_DIR / chart), "-f", str(f), check=False)
        if rc != 0:
            fail(f"helm lint --strict {chart} -f {f.name}:\n{out}{err}")
        n += 1
    return f"{n} lint runs clean"


@functools.lru_cache(maxsize=None)
def k8s_validator(version, kind, api_version):
    import jsonschema
    import kubernetes_validate
    from referencing import Registry, Resource

    base = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{version}-local-strict"
    if not base.is_dir():
        sys.exit(f"kubernetes-validate has no schemas for {version}: {SETUP}")
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    path = base / f"{kind.lower()}-{group}.json"
    if not path.exists():
        return None
    schema = json.loads(path.read_text())
    defs = _k8s_definitions(version)
    registry = Resource.from_contents(schema) @ (defs @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


@functools.lru_cache(maxsize=None)
def _k8s_definitions(version):
    import kubernetes_validate
    from referencing import Resource

    p = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{version}-local-strict" / "_definitions.json"
    return Resource.from_contents(json.loads(p.read_text()))


def check_kubernetes(args):
    try:
        import jsonschema  # noqa: F401
        import kubernetes_validate  # noqa: F401
    except ImportError:
        sys.exit(f"kubernetes-validate is not installed: {SETUP}")
    import jsonschema

    crds = json.loads((TESTS / "crd-schemas.json").read_text())
    checked, errors = 0, []
    for chart, case, objs in all_renders():
        for o in objs:
            where = f"{chart}/{case}: {o['kind']} {o['metadata']['name']}"
            key = f"{o['apiVersion']}/{o['kind']}"
            if key in crds:
                for e in jsonschema.Draft202012Validator(crds[key]).iter_errors(o):
                    errors.append(f"{where}: {e.json_path}: {e.message}")
                checked += 1
                continue
            for v in K8S_VERSIONS:
                val = k8s_validator(v, o["kind"], o["apiVersion"])
                if val is None:
                    errors.append(f"{where}: no Kubernetes {v} schema for {key}")
                    continue
                for e in val.iter_errors(o):
                    errors.append(f"{where} (Kubernetes {v}): {e.json_path}: {e.message}")
                checked += 1
    if errors:
        fail("\n".join(errors[:50]))
    return f"{checked} object validations against Kubernetes {', '.join(K8S_VERSIONS)} (strict) and the CRD schemas"


def check_configs(args):
    n = 0
    for chart, case, objs in all_renders():
        for wl, pod in pods(objs):
            text = config_of(objs, pod)
            for c in pod["containers"]:
                if not is_yarilo(c):
                    continue
                if text is None:
                    fail(f"{chart}/{case}: {wl['metadata']['name']} runs yarilo without a config volume")
                effective_config(args, text, container_env(c, objs))
                n += 1
    return f"{n} container configurations pass `yarilo config check`"


def check_commands(args):
    subs = subcommands(args.yarilo)
    seen = set()
    for chart, case, objs in all_renders():
        for wl, pod in pods(objs):
            mounts_config = any(v["name"] == "config" for v in pod.get("volumes", []))
            for c in pod["containers"] + pod.get("initContainers", []):
                where = f"{chart}/{case}: {wl['metadata']['name']}/{c['name']}"
                if not is_yarilo(c):
                    if c["image"].split(":")[0].endswith("redis") and c["command"] == ["redis-server"]:
                        continue
                    fail(f"{where}: runs {c.get('command')} from {c['image']}, not a yarilo subcommand")
                cmd = c["command"]
                if len(cmd) != 4 or cmd[1] not in subs or cmd[2:] != ["--config", CONFIG_PATH]:
                    fail(f"{where}: command {cmd} is not `yarilo <subcommand> --config {CONFIG_PATH}` with a subcommand of {sorted(subs)}")
                if not mounts_config:
                    fail(f"{where}: {CONFIG_PATH} is not mounted")
                if cmd[1] not in seen:
                    yarilo(args, [cmd[1], "--help"])
                    seen.add(cmd[1])
    return f"subcommands used: {', '.join(sorted(seen))}"


def check_ports(args):
    n = 0
    for chart, case, objs in all_renders():
        listening = {}  # (workload, container) -> ports its config listens on
        for wl, pod in pods(objs):
            text = config_of(objs, pod)
            for c in pod["containers"]:
                key = (wl["metadata"]["name"], c["name"])
                if is_yarilo(c):
                    env = container_env(c, objs)
                    cfg = effective_config(args, text, env)
                    listening[key] = listened_ports(cfg, c["command"][1], env)
                else:
                    listening[key] = {int(a) for a in c.get("args", []) if str(a).isdigit()} & {p["containerPort"] for p in c.get("ports", [])}
                where = f"{chart}/{case}: {key[0]}/{key[1]}"
                declared = {p["containerPort"] for p in c.get("ports", [])}
                if declared != listening[key]:
                    fail(f"{where}: container ports {sorted(declared)} but the process listens on {sorted(listening[key])}")
                for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                    pr = c.get(probe)
                    if not pr:
                        continue
                    port = (pr.get("httpGet") or pr.get("tcpSocket"))["port"]
                    if port not in listening[key]:
                        fail(f"{where}: {probe} on port {port}, which nothing listens on")
                    if is_yarilo(c) and pr.get("httpGet") and port != listen_port(env["TELEMETRY_LISTEN"]):
                        fail(f"{where}: {probe} is not on the telemetry port")
                    n += 1
        for svc in by_kind(objs, "Service"):
            sel = svc["spec"]["selector"]
            targets = [
                (wl, pod) for wl, pod in pods(objs)
                if all(wl["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in sel.items())
            ]
            if not targets:
                fail(f"{chart}/{case}: Service {svc['metadata']['name']} selects no pod of this release")
            for sp in svc["spec"]["ports"]:
                tp = sp.get("targetPort", sp["port"])
                for wl, pod in targets:
                    hit = None
                    for c in pod["containers"]:
                        for cp in c.get("ports", []):
                            if tp in (cp["containerPort"], cp.get("name")):
                                hit = (c, cp["containerPort"])
                    if not hit:
                        fail(f"{chart}/{case}: Service {svc['metadata']['name']} port {sp['name']} targets {tp}, which no container of {wl['metadata']['name']} declares")
                    if hit[1] not in listening[(wl["metadata"]["name"], hit[0]["name"])]:
                        fail(f"{chart}/{case}: Service {svc['metadata']['name']} targets {hit[1]}, which {hit[0]['name']} does not listen on")
                    n += 1
    return f"{n} Service and probe ports checked against the rendered configurations"


def check_generated(args):
    if not args.yarilo:
        sys.exit("--yarilo BIN: the config schema is checked against the binary")
    p = subprocess.run([sys.executable, str(HELM_DIR / "tools" / "chartgen.py"), "--check", f"--yarilo={args.yarilo}"], capture_output=True, text=True)
    if p.returncode != 0:
        fail(p.stdout + p.stderr)
    unmarked = []
    for chart in CHARTS + ["yarilo-lib"]:
        for f in (HELM_DIR / chart).glob("values*.yaml"):
            lines = f.read_text().splitlines()
            for i, line in enumerate(lines):
                # Every limits.cpu says which it is (deployment seed, "Where the chart's CPU limits come from").
                if re.match(r"^\s+cpu:", line) and i > 0 and any(re.match(r"^\s+limits:\s*$", l) for l in lines[max(0, i - 3):i]):
                    if not re.search(r"#\s*(measured|unmeasured)\b", line):
                        unmarked.append(f"{f.relative_to(HELM_DIR)}:{i + 1}: {line.strip()}")
    if unmarked:
        fail("limits.cpu without `# measured` / `# unmeasured`:\n" + "\n".join(unmarked))
    return "schemas, READMEs and common values blocks are current; every limits.cpu is marked"


def check_counts(args):
    rows = []
    for chart, case, objs in all_renders():
        kinds = Counter(o["kind"] for o in objs)
        rows.append(f"{chart:18} {case:17} {len(objs):3}  " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    return "objects per chart and values set:\n" + "\n".join(rows)


def check_unit(args):
    import unit_cases

    return unit_cases.run(sys.modules[__name__])


CHECKS = {
    "lint": check_lint,
    "kubernetes": check_kubernetes,
    "configs": check_configs,
    "commands": check_commands,
    "ports": check_ports,
    "unit": check_unit,
    "generated": check_generated,
    "counts": check_counts,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--yarilo", help="the yarilo binary")
    ap.add_argument("checks", nargs="+", choices=sorted(CHECKS))
    args = ap.parse_args()
    sys.path.insert(0, str(TESTS))
    status = 0
    for name in args.checks:
        try:
            print(f"{name}: ok: {CHECKS[name](args)}")
        except Failure as e:
            print(f"{name}: FAILED: {e}")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
