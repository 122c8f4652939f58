#!/usr/bin/env python3
"""Generates what the yarilo charts derive from their values.yaml files.

values.yaml is the one source: the comments above a key document it
(`# -- text`, helm-docs style) and may refine its JSON schema
(`# @schema {...}`). From it this tool writes, per chart:

* the blocks shared by every chart (`# @common begin FILE` … `# @common end`,
  copied from helm/yarilo-lib/FILE),
* values.schema.json: every key typed from its default, every object closed
  (additionalProperties: false) unless its annotation opens it,
* the values table of README.md (between `<!-- values:begin -->` and
  `<!-- values:end -->`).

* helm/yarilo-lib/config-schema.json, the keys `yarilo config dump` knows,
  which every `config` value (raw yarilo.yaml keys) is checked against.

    chartgen.py [--yarilo=BIN]          regenerate all of it (the config
                                        schema only with the binary)
    chartgen.py --check [--yarilo=BIN]  exit 1 (naming the files) if anything is stale
"""

import json
import re
import sys
from pathlib import Path

import yaml

HELM = Path(__file__).resolve().parent.parent
LIB = HELM / "yarilo-lib"
CONFIG_SCHEMA = LIB / "config-schema.json"
CHARTS = ["yarilo-shared", "yarilo-director", "yarilo-backend", "yarilo-standalone"]

KEY_LINE = re.compile(r"^(\s*)([A-Za-z0-9_.\-]+):(\s|$)")
COMMON_BEGIN = re.compile(r"^( *)# @common begin (\S+)\s*$")


def sync_common(text):
    """values.yaml text with every common block refreshed from yarilo-lib."""
    out, lines, i = [], text.splitlines(keepends=True), 0
    while i < len(lines):
        m = COMMON_BEGIN.match(lines[i])
        out.append(lines[i])
        i += 1
        if not m:
            continue
        pad = m.group(1)
        block = (LIB / m.group(2)).read_text().splitlines()
        out.extend((pad + b).rstrip() + "\n" for b in block)
        while i < len(lines) and not lines[i].lstrip().startswith("# @common end"):
            i += 1
        if i == len(lines):
            raise SystemExit(f"unterminated '# @common begin {m.group(2)}'")
    return "".join(out)


def annotations(text):
    """{path tuple: (description, schema dict)} from the comments above keys."""
    result, stack, pending = {}, [], []
    list_indent = None  # inside a block list: its keys are not values keys
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#"):
            pending.append(stripped)
            continue
        if not stripped:
            pending = []
            continue
        indent = len(raw) - len(raw.lstrip())
        if list_indent is not None and indent > list_indent:
            pending = []
            continue
        list_indent = None
        if stripped.startswith("- "):
            list_indent = indent - 1
            pending = []
            continue
        m = KEY_LINE.match(raw)
        if not m:
            pending = []
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = tuple(k for _, k in stack) + (m.group(2),)
        stack.append((indent, m.group(2)))
        desc, schema = [], {}
        for c in pending:
            body = c[1:].strip()
            if body.startswith("@schema "):
                schema.update(json.loads(body[len("@schema "):]))
            elif body.startswith("-- "):
                desc.append(body[3:])
            elif desc and not body.startswith("@"):
                desc.append(body)
        result[path] = (" ".join(desc), schema)
        pending = []
    return result


def infer(value):
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if isinstance(value, str):
        return {"type": "string"}
    if isinstance(value, list):
        s = {"type": "array"}
        if value:
            s["items"] = infer(value[0]) if not isinstance(value[0], dict) else {"type": "object"}
        else:
            s["items"] = {"type": "string"}
        return s
    if isinstance(value, dict):
        return {"type": "object"}
    return {}


def schema_for(value, path, notes):
    desc, ann = notes.get(path, ("", {}))
    if "$ref" in ann:
        return {"$ref": ann["$ref"], "description": desc} if desc else {"$ref": ann["$ref"]}
    s = infer(value)
    if isinstance(value, dict) and "additionalProperties" not in ann:
        s["properties"] = {k: schema_for(v, path + (k,), notes) for k, v in value.items()}
        s["additionalProperties"] = False
    s.update(ann)
    if desc:
        s["description"] = desc
    return s


def schema(values, notes):
    s = schema_for(values, (), notes)
    s["$schema"] = "http://json-schema.org/draft-07/schema#"
    # An umbrella chart may set globals of its own.
    if "global" in s.get("properties", {}):
        s["properties"]["global"]["additionalProperties"] = True
    # Raw yarilo.yaml keys (`config`) are checked against the binary's own
    # keys, so a misspelt one is refused at render time too.
    s["definitions"] = {"yariloConfig": json.loads(CONFIG_SCHEMA.read_text())}
    # Helm hands every chart the (empty) values of its library dependency.
    s["properties"]["yarilo-lib"] = {"type": "object", "description": "Reserved: the library chart's values."}
    return json.dumps(s, indent=2, sort_keys=False) + "\n"


def rows(value, path, notes):
    desc, ann = notes.get(path, ("", {}))
    if isinstance(value, dict) and value and "additionalProperties" not in ann:
        for k, v in value.items():
            yield from rows(v, path + (k,), notes)
        return
    typ = ann.get("type") or infer(value).get("type", "")
    if isinstance(typ, list):
        typ = " or ".join(typ)
    if "enum" in ann:
        typ += " (" + ", ".join(json.dumps(e) for e in ann["enum"]) + ")"
    default = json.dumps(value, separators=(", ", ": "))
    yield "| `{}` | {} | `{}` | {} |".format(
        ".".join(path), typ, default.replace("|", "\\|"), desc.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
    )


def readme_table(values, notes):
    head = ["| Key | Type | Default | Description |", "|---|---|---|---|"]
    return "\n".join(head + list(rows(values, (), notes))) + "\n"


def config_schema(value):
    """JSON schema of yarilo.yaml from `yarilo config dump` of an empty file:
    every section and key the binary knows, objects closed, types from the
    defaults. Empty maps (log.modules) are free; null defaults (unset
    options) and empty lists take any value the binary itself checks."""
    if value is None:
        return {}
    if isinstance(value, dict):
        if not value:
            return {"type": "object"}
        return {
            "type": "object",
            "properties": {k: config_schema(v) for k, v in value.items()},
            "additionalProperties": False,
        }
    if isinstance(value, list):
        return {"type": "array", "items": config_schema(value[0])} if value else {"type": "array"}
    return infer(value)


def dump_config_schema(yarilo_bin):
    import subprocess
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        p = subprocess.run([yarilo_bin, "config", "dump", "--config", f.name], capture_output=True, text=True, check=True)
    s = config_schema(yaml.safe_load(p.stdout))
    s["description"] = "Raw yarilo.yaml keys, as `yarilo config dump` lists them (see docs/configuration.md)."
    # ssl_mode is "no", starttls or ssl (a YAML 1.1 reader, Helm's included, turns an unquoted no into false).
    for svc in s["properties"]["services"]["properties"].values():
        svc["properties"]["ssl_mode"] = {"enum": ["no", "starttls", "ssl"]}
    return json.dumps(s, indent=1, sort_keys=True) + "\n"


def replace_between(text, begin, end, body, name):
    a, b = text.find(begin), text.find(end)
    if a < 0 or b < a:
        raise SystemExit(f"{name}: markers {begin} … {end} not found")
    return text[: a + len(begin)] + "\n" + body + text[b:]


def generate(chart):
    """{path: wanted text} for one chart."""
    d = HELM / chart
    values_text = sync_common((d / "values.yaml").read_text())
    values = yaml.safe_load(values_text)
    notes = annotations(values_text)
    readme = (d / "README.md").read_text()
    readme = replace_between(
        readme, "<!-- values:begin -->", "<!-- values:end -->", readme_table(values, notes), chart
    )
    return {
        d / "values.yaml": values_text,
        d / "values.schema.json": schema(values, notes),
        d / "README.md": readme,
    }


def main(argv):
    check = "--check" in argv
    yarilo_bin = next((a.split("=", 1)[1] for a in argv if a.startswith("--yarilo=")), None)
    charts = [a for a in argv if not a.startswith("--")] or CHARTS
    stale = []
    if yarilo_bin:
        # The binary is the source of the config schema; without it the committed one is used.
        text = dump_config_schema(yarilo_bin)
        old = CONFIG_SCHEMA.read_text() if CONFIG_SCHEMA.exists() else None
        if old != text:
            stale.append(CONFIG_SCHEMA)
            if not check:
                CONFIG_SCHEMA.write_text(text)
    for chart in charts:
        for path, text in generate(chart).items():
            old = path.read_text() if path.exists() else None
            if old != text:
                stale.append(path)
                if not check:
                    path.write_text(text)
    if check and stale:
        for p in stale:
            print(f"stale: {p.relative_to(HELM.parent)} (run helm/tools/chartgen.py --yarilo=target/debug/yarilo)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
