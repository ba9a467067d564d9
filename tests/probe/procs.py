#!/usr/bin/env python3
"""Runs commands at once, each optionally SIGKILLed after a delay, for tests/probe/kill_during_save.sh.

    procs.py TIMEOUT SPEC [SPEC ...]
    SPEC = TAG:START:KILL:OUT:ERR:ARG1\x1fARG2\x1f...   (fields separated by ':'; arguments by \x1f)

START: seconds after the first start to launch this one; KILL: seconds after its own launch to SIGKILL it
("-" = never). A command still running after TIMEOUT seconds is killed and reported as a hang. Prints one
line per command: TAG RC KILLED ELAPSED, where RC is the exit status (128+signal when a signal ended it,
124 for a hang), KILLED is 1 when this script's SIGKILL ended it, ELAPSED is seconds from launch to end.
"""
import os
import signal
import subprocess
import sys
import time


def main(argv):
    timeout = float(argv[0])
    specs = []
    for spec in argv[1:]:
        tag, start, kill, out, err, args = spec.split(":", 5)
        specs.append(dict(tag=tag, start=float(start), kill=None if kill == "-" else float(kill), out=out,
                          err=err, args=args.split("\x1f")))
    t0 = time.perf_counter()
    pending = sorted(specs, key=lambda s: s["start"])
    running = []
    while pending or running:
        now = time.perf_counter() - t0
        while pending and pending[0]["start"] <= now:
            s = pending.pop(0)
            with open(s["out"], "wb") as out, open(s["err"], "wb") as err:
                s["proc"] = subprocess.Popen(s["args"], stdout=out, stderr=err, stdin=subprocess.DEVNULL)
            s["launched"] = time.perf_counter()
            s["killed"] = 0
            running.append(s)
        for s in list(running):
            rc = s["proc"].poll()
            age = time.perf_counter() - s["launched"]
            if rc is None:
                if s["kill"] is not None and age >= s["kill"]:
                    s["proc"].send_signal(signal.SIGKILL)
                    s["proc"].wait()
                    s["killed"] = 1
                elif age >= timeout:
                    s["proc"].send_signal(signal.SIGKILL)
                    s["proc"].wait()
                    s["hang"] = True
                else:
                    continue
            s["elapsed"] = time.perf_counter() - s["launched"]
            running.remove(s)
        # Sleep until the next event, in steps of at most 0.2 ms so that kill delays are precise.
        time.sleep(0.0002)
    for s in specs:
        rc = s["proc"].returncode
        rc = 124 if s.get("hang") else (128 - rc if rc < 0 else rc)
        print(f"{s['tag']} {rc} {s['killed']} {s['elapsed']:.6f}")


if __name__ == "__main__":
    main(sys.argv[1:])
