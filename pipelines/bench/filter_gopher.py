#!/usr/bin/env python3
"""filter_gopher.py: filter's default checks written in plain Python, for
BENCHMARKS.md to set beside `filter` on the same file.

    python3 pipelines/bench/filter_gopher.py gen.jsonl > fit.jsonl

It reads generation records (JSONL), checks every answer as filter does
with its default settings (length, reasoning_only, empty, think_residue,
tool_call, loop: the Gopher repetition measures of Rae et al. 2021 and a
repeated tail, with the same definitions and thresholds as lib/quality),
writes the records whose answers pass to stdout as they were, and prints
filter's summary line to stderr, so the two can be checked against each
other. Standard library only, one process.
"""
import json
import sys
from collections import Counter

MIN_BYTES = 500
DUP_LINES, DUP_LINE_BYTES, DUP_PARAS, DUP_PARA_BYTES = 0.5, 0.3, 0.3, 0.3
TOP_NGRAM = {2: 0.20, 3: 0.18, 4: 0.16}
DUP_NGRAM = {5: 0.40, 6: 0.35, 7: 0.32, 8: 0.30, 9: 0.28, 10: 0.26}
TAIL_COPIES, TAIL_BYTES = 4, 100
MARKERS = ["<think>", "</think>", "<thinking>", "</thinking>", "<seed:think>", "</seed:think>",
           "<|channel|>", "<|start|>", "<|end|>", "<|message|>", "<|return|>", "<|call|>",
           "<|begin_of_thought|>", "<|end_of_thought|>", "<|begin_of_solution|>", "<|end_of_solution|>",
           "\u25c1think\u25b7", "\u25c1/think\u25b7", "[THINK]", "[/THINK]"]
ASCII_SPACE = b" \t\n\r\x0b\x0c"


def repeated_tail(t):
    """(copies, span, covered) of the run of copies of one span ending t."""
    t = t.rstrip(ASCII_SPACE)
    n = len(t)
    if n < 2:
        return 0, 0, 0
    k = min(8, n // 2)
    suffix = t[n - k:]
    lo = max(0, n - 1 - 4096 - k)
    limit = n - 1
    best = (0, 0, 0)
    for _ in range(8):
        if limit - lo < k:
            break
        q = t.rfind(suffix, lo, limit)
        if q < 0:
            break
        p = n - (q + k)
        run = 0
        i = n - 1 - p
        while i >= 0 and t[i] == t[i + p]:
            run += 1
            i -= 1
        copies = (run + p) // p
        if copies >= 2 and run + p > best[2]:
            best = (copies, p, run + p)
        limit = q + k - 1
    return best


def line_measures(t):
    lines, dup_lines, dup_line_bytes = 0, 0, 0
    paras, dup_paras, dup_para_bytes = 0, 0, 0
    seen_lines, seen_paras = set(), set()
    para, para_start, para_end = [], -1, -1
    pos = 0

    def end_para():
        nonlocal paras, dup_paras, dup_para_bytes, para
        if para:
            paras += 1
            key = tuple(para)
            if key in seen_paras:
                dup_paras += 1
                dup_para_bytes += para_end - para_start
            else:
                seen_paras.add(key)
            para = []

    for line in t.split(b"\n"):
        start, end = pos, pos + len(line)
        pos = end + 1
        if not line.strip(b" \t\r"):
            end_para()
            continue
        lines += 1
        if line in seen_lines:
            dup_lines += 1
            dup_line_bytes += len(line)
        else:
            seen_lines.add(line)
        if not para:
            para_start = start
        para.append(line)
        para_end = end
    end_para()
    return (dup_lines / lines if lines else 0.0, dup_line_bytes,
            dup_paras / paras if paras else 0.0, dup_para_bytes)


def loops(text):
    t = text.encode("utf-8", "surrogatepass")
    copies, _, covered = repeated_tail(t)
    if copies >= TAIL_COPIES and covered >= TAIL_BYTES:
        return "tail"
    if len(t) < MIN_BYTES or not t:
        return None
    total = len(t)
    lf, lb, pf, pb = line_measures(t)
    if lf > DUP_LINES or lb / total > DUP_LINE_BYTES or pf > DUP_PARAS or pb / total > DUP_PARA_BYTES:
        return "lines"
    words = t.split()
    lens = [len(w) for w in words]
    starts = [0]
    for n in lens:
        starts.append(starts[-1] + n)
    for n, thresh in TOP_NGRAM.items():
        if len(words) < n:
            break
        grams = list(zip(*(words[i:] for i in range(n))))
        counts = Counter(grams)
        top = max(counts.values())
        if top < 2:
            continue
        size = max(starts[i + n] - starts[i] for i, g in enumerate(grams) if counts[g] == top)
        if min(top * size, starts[-1]) / total > thresh:
            return "top_%dgram" % n
    for n, thresh in DUP_NGRAM.items():
        if len(words) < n:
            break
        seen, covered, dup = set(), 0, 0
        for i, g in enumerate(zip(*(words[i:] for i in range(n)))):
            if g in seen:
                dup += starts[i + n] - starts[max(i, covered)]
                covered = i + n
            else:
                seen.add(g)
        frac = dup / total
        if frac > thresh:
            return "dup_%dgram" % n
        if not any(t2 < frac for m, t2 in DUP_NGRAM.items() if m > n):
            break
    return None


def tools_of(rec):
    tools = rec.get("tools")
    if isinstance(tools, str):
        tools = json.loads(tools) if tools.strip() else None
    names = set()
    for t in tools or []:
        name = (t.get("function") or {}).get("name") or t.get("name")
        if name:
            names.add(name)
    return names


def tool_call_bad(calls, tools):
    for c in calls:
        f = c.get("function") or {}
        if f.get("name") not in tools:
            return True
        args = f.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                return True
        if not isinstance(args, dict):
            return True
    return False


def check(prompt, text, reasoning, finish, calls, rec):
    if finish == "length":
        return "length"
    blank = not calls and not text.strip()
    if blank and reasoning.strip():
        return "reasoning_only"
    if blank:
        return "empty"
    for s in (text, reasoning):
        for m in MARKERS:
            if m in s and m not in prompt:
                return "think_residue"
    if calls and tool_call_bad(calls, tools_of(rec)):
        return "tool_call"
    if loops(text):
        return "loop"
    return None


def answers(rec):
    """(prompt, text, reasoning, finish, tool calls) of every answer."""
    out = rec["output"]
    msgs = out.get("messages")
    if msgs:
        for t in out.get("turns") or []:
            i = t["message"]
            m = msgs[i]
            prompt = next((u.get("content") or "" for u in reversed(msgs[:i]) if u.get("role") == "user"), "")
            yield prompt, m.get("content") or "", m.get("reasoning_content") or "", t.get("finish_reason"), m.get("tool_calls") or []
        return
    prompt = next((m.get("content") or "" for m in reversed(rec.get("messages") or []) if m.get("role") == "user"), rec.get("prompt") or "")
    yield prompt, out.get("text") or "", out.get("reasoning") or "", out.get("finish_reason"), out.get("tool_calls") or []


def main():
    read = kept = rejected = 0
    dropped = Counter()
    out = sys.stdout.buffer
    paths = sys.argv[1:] or ["-"]
    for path in paths:
        f = sys.stdin.buffer if path == "-" else open(path, "rb")
        for line in f:
            read += 1
            try:
                rec = json.loads(line)
            except ValueError:
                rejected += 1
                continue
            if not isinstance(rec, dict) or rec.get("output") is None:
                if rec.get("error") is not None:
                    out.write(line)
                continue
            reason = None
            for a in answers(rec):
                reason = check(*a, rec)
                if reason:
                    break
            if reason:
                dropped[reason] += 1
            else:
                kept += 1
                out.write(line)
    by = ", ".join("%s %d" % kv for kv in sorted(dropped.items(), key=lambda kv: (-kv[1], kv[0])))
    print("filter_gopher.py: read %d, kept %d, dropped %d (%s), rejected %d" % (read, kept, sum(dropped.values()), by, rejected),
          file=sys.stderr)


if __name__ == "__main__":
    main()
