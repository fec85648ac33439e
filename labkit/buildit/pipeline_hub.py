"""The schedule a pipeline ran, read from the grader's record of its
messages, and its slots computed by the grader.

    ranks = schedule(windows, p)     # in pipeline_parallel.from_hub

Under grading (scripts/grading/hub.py) every message between two stages
goes through the hub, in the rerun's own process, which records per rank,
in order, each send and receive with its peer and the message's last two
values (the :class:`~labkit.buildit.pipeline_parallel.Stage`'s header:
the micro-batch and the sender's slot clock). A rank imports the
student's code, so its own record of what it ran (``events``, ``end``,
``in_flight``) is the student's to rewrite; here the same facts come from
the messages alone:

- stage r runs the forward of micro-batch i when it receives i's
  activation from stage r - 1 (stage 0: when it sends i to stage 1), and
  its backward when it receives i's gradient from stage r + 1 (the last
  stage: when it sends i's gradient to stage p - 2);
- the slots are the grader's: a forward or a backward takes one slot and
  starts when the stage is free and its input is ready (the end of the
  same micro-batch's slot on the stage it came from), the rule the Stage
  applies (Narayanan et al., SC 2021, Fig. 4); the clock a message
  carries is ignored;
- the micro-batches in flight (forward run, backward not yet) are counted
  along that order.
"""
from __future__ import annotations


def orders(windows: list, p: int) -> list:
    """Per stage, ``[[kind, i], ...]`` in the order its messages went."""
    out = []
    for r, (calls,) in enumerate(windows):
        got = []
        for c in calls:
            op = c[0]
            if op == "barrier":
                continue
            if op not in ("send", "recv") or len(c) < 5:
                raise ValueError(f"stage {r} made a {op}: stages only "
                                 "send and receive")
            if len(c[4]) != 2:
                raise ValueError(f"stage {r}'s {op} carried no stage "
                                 "header (a float message from Stage)")
            peer, i = int(c[3]), int(c[4][0])
            if (op, peer) == ("recv", r - 1) or \
                    (r == 0 and (op, peer) == ("send", 1)):
                got.append(["F", i])
            elif (op, peer) == ("recv", r + 1) or \
                    (r == p - 1 and (op, peer) == ("send", r - 1)):
                got.append(["B", i])
            elif (op, peer) not in (("send", r + 1), ("send", r - 1)):
                raise ValueError(f"stage {r} did a {op} with stage {peer}")
        out.append(got)
    return out


def slots(order: list, p: int) -> tuple[list, list]:
    """``(events, ends)``: per stage ``[kind, i, start]`` for each op of
    ``order`` and the stage's last slot's end, by the grader's clock."""
    done, pos = {}, [0] * p      # (kind, i, stage) -> end of its slot
    clock = [0.0] * p
    events = [[] for _ in range(p)]
    moved = True
    while moved:
        moved = False
        for r in range(p):
            while pos[r] < len(order[r]):
                kind, i = order[r][pos[r]]
                frm = r - 1 if kind == "F" else r + 1
                if 0 <= frm < p:
                    if (kind, i, frm) not in done:
                        break          # its input is not ready yet
                    ready = done[(kind, i, frm)]
                else:
                    ready = 0.0
                start = max(clock[r], ready)
                clock[r] = start + 1.0
                done[(kind, i, r)] = clock[r]
                events[r].append([kind, i, start])
                pos[r] += 1
                moved = True
    if pos != [len(o) for o in order]:
        raise ValueError("the stages' messages wait for each other: no "
                         "schedule runs them")
    return events, clock


def in_flight(order: list) -> int:
    """The most micro-batches forwarded and not yet backwarded at once."""
    held, peak = set(), 0
    for kind, i in order:
        if kind == "F":
            held.add(i)
            peak = max(peak, len(held))
        else:
            held.discard(i)
    return peak


def schedule(windows: list, p: int) -> list:
    """Per stage ``{"events", "end", "in_flight", "no_backward"}``, from
    the hub's record alone."""
    if len(windows) != p or any(len(w) != 1 for w in windows):
        raise ValueError("one counting window per stage")
    order = orders(windows, p)
    events, ends = slots(order, p)
    out = []
    for r in range(p):
        f = {i for k, i in order[r] if k == "F"}
        b = {i for k, i in order[r] if k == "B"}
        out.append({"events": events[r], "end": ends[r],
                    "in_flight": in_flight(order[r]),
                    "no_backward": sorted(f - b)})
    return out
