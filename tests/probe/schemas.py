#!/usr/bin/env python3
"""Random JSON Schemas for tests/probe/schemas.sh (a function of the seed and the trial number).

usage: schemas.py SEED TRIAL OUT.json     prints the trial's kind on stdout: "bomb" or "schema"

A bomb is the outside probe's shape: $defs L0..L{depth-1}, each an object of `fan` optional properties that all
$ref the next level, the last an integer, a top-level $ref to L0 (a 1-5 KB schema that expands to billions of
regex nodes); kvlm must refuse it at once. A schema mixes the keywords real schemas use, enum and const beside
type, length, pattern and properties keywords included (the probe found outputs that failed their own schema
there): kvlm must write output that validates, or refuse the schema with an error.
"""
import json
import random
import sys

STRINGS = ["a", "bb", "ccc", "dddd", "hello", "x y", "", "Lily", "42", "true"]
VALUES = STRINGS + [0, 1, 2, -3, 7, 1.5, True, False, None, [1, 2], {"a": 1}, {"a": "x"}]


def bomb(rng):
    fan, depth = rng.randint(2, 12), rng.randint(5, 16)
    defs = {}
    for level in range(depth + 1):
        if level == depth:
            defs[f"L{level}"] = {"type": rng.choice(["integer", "string", "boolean"])}
        else:
            props = {f"p{i}": {"$ref": f"#/$defs/L{level + 1}"} for i in range(fan)}
            defs[f"L{level}"] = {"type": "object", "properties": props}
    return {"$defs": defs, "$ref": "#/$defs/L0"}


def leaf(rng):
    kind = rng.choice(["string", "integer", "number", "boolean", "null", "enum", "const"])
    if kind == "string":
        s = {"type": "string"}
        if rng.random() < 0.5:
            s["maxLength"] = rng.randint(0, 6)
        if rng.random() < 0.3:
            s["minLength"] = rng.randint(0, 3)
        if rng.random() < 0.3:
            s["pattern"] = rng.choice(["[a-z]+", "[0-9]{1,3}", "x+", "(ab)*", "[A-Z][a-z]{0,4}"])
        if rng.random() < 0.2:
            s["format"] = rng.choice(["date", "uuid", "email"])
        return s
    if kind in ("integer", "number", "boolean", "null"):
        return {"type": kind}
    s = {}
    if kind == "enum":
        s["enum"] = rng.sample(VALUES, rng.randint(1, 5))
    else:
        s["const"] = rng.choice(VALUES)
    # What the probe found ignored: keywords beside enum/const.
    if rng.random() < 0.7:
        s["type"] = rng.choice(["string", "integer", "number", "boolean", "null", "object", "array",
                                ["string", "null"], ["integer", "string"]])
    if rng.random() < 0.3:
        s["maxLength"] = rng.randint(0, 4)
    if rng.random() < 0.2:
        s["pattern"] = rng.choice(["[a-z]+", "x+", "[0-9]+"])
    if rng.random() < 0.2:
        s["properties"] = {"a": rng.choice([{"type": "string"}, {"type": "integer"}])}
    return s


def schema(rng, depth=0):
    if depth >= 3 or rng.random() < 0.4:
        return leaf(rng)
    kind = rng.choice(["object", "object", "array", "anyOf"])
    if kind == "object":
        n = rng.randint(1, 4)
        props = {f"k{i}": schema(rng, depth + 1) for i in range(n)}
        s = {"type": "object", "properties": props}
        required = [k for k in props if rng.random() < 0.6]
        if required:
            s["required"] = required
        if rng.random() < 0.5:
            s["additionalProperties"] = False
        return s
    if kind == "array":
        s = {"type": "array", "items": schema(rng, depth + 1)}
        if rng.random() < 0.5:
            s["maxItems"] = rng.randint(0, 3)
        if rng.random() < 0.3:
            s["minItems"] = rng.randint(0, 2)
        return s
    return {"anyOf": [schema(rng, depth + 1) for _ in range(rng.randint(1, 3))]}


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    seed, trial, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    rng = random.Random(seed * 1000003 + trial)
    kind = "bomb" if rng.random() < 0.25 else "schema"
    with open(out, "w") as f:
        json.dump(bomb(rng) if kind == "bomb" else schema(rng), f)
    print(kind)


if __name__ == "__main__":
    main()
