#!/usr/bin/env python3
"""Validates a dsplan --json output against a schema in docs/schema/.

Usage: validate_json.py SCHEMA_DIR SCHEMA_FILE OUTPUT_FILE
"$ref"s to sibling files are inlined first, so any jsonschema release with Draft 2020-12 support
(Debian 12's python3-jsonschema 4.10 included) validates the same way.
"""
import json
import os
import sys

try:
    import jsonschema
except ImportError:
    sys.exit("python3-jsonschema is not installed (scripts/setup.sh installs it)")


def inline(node, folder):
    if isinstance(node, dict):
        if set(node) == {"$ref"} and not node["$ref"].startswith("#"):
            with open(os.path.join(folder, node["$ref"])) as f:
                sub = json.load(f)
            sub.pop("$schema", None)
            sub.pop("$id", None)
            return inline(sub, folder)
        return {k: inline(v, folder) for k, v in node.items()}
    if isinstance(node, list):
        return [inline(v, folder) for v in node]
    return node


def main():
    folder, schema_file, output = sys.argv[1:4]
    with open(os.path.join(folder, schema_file)) as f:
        schema = inline(json.load(f), folder)
    with open(output) as f:
        doc = json.load(f)
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    for e in errors[:5]:
        print(f"{schema_file}: {'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message[:300]}")
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
