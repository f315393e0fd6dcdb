#!/usr/bin/env python3
"""Near-duplicate prompts by MinHash and banded LSH, in Python with numpy.

The neardup benchmark's peer for `dedup --near`: the same text (each
message's role, then its content, on lines of their own), the same words
(runs of non-white-space, a CJK, kana or hangul character a word alone),
the same shingles (a rolling polynomial over the words' 64-bit xxh3
hashes, mixed), the same permutations (a*h+b mod 2^64 from SplitMix64 of
the seed, the top 32 bits kept), the same band keys, and the same rule: a
prompt whose best candidate agrees on at least threshold*K positions is
dropped; otherwise it is kept and indexed. Word hashes are xxh3 from
libxxhash through ctypes, so the signatures are dedup's own and the kept
records should be the same; without libxxhash, blake2b stands in (and the
output differs by chance only).

Reads JSONL prompt records (files or stdin), writes the kept lines to
stdout and one summary line to stderr.
"""

import argparse
import ctypes
import ctypes.util
import hashlib
import json
import re
import sys

import numpy as np

M64 = (1 << 64) - 1
ROLL_MUL = 0x9E3779B97F4A7C15

OWN_WORD = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\U00020000-\U0003ffff"
WORDS = re.compile("[" + OWN_WORD + "]|[^\\s" + OWN_WORD + "]+")
SURROGATE = re.compile("[\ud800-\udfff]")


def splitmix(state):
    state = (state + 0x9E3779B97F4A7C15) & M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return state, z ^ (z >> 31)


def fmix(z):
    """The 64-bit finalizer, on a numpy uint64 array."""
    z = (z ^ (z >> np.uint64(33))) * np.uint64(0xFF51AFD7ED558CCD)
    z = (z ^ (z >> np.uint64(33))) * np.uint64(0xC4CEB9FE1A85EC53)
    return z ^ (z >> np.uint64(33))


def word_hasher():
    name = ctypes.util.find_library("xxhash") or "libxxhash.so.0"
    try:
        lib = ctypes.CDLL(name)
        f = lib.XXH3_64bits
    except (OSError, AttributeError):
        return (lambda w: int.from_bytes(hashlib.blake2b(w, digest_size=8).digest(), "little")), "blake2b"
    f.argtypes, f.restype = [ctypes.c_char_p, ctypes.c_size_t], ctypes.c_uint64
    return (lambda w: f(w, len(w))), "xxh3 (libxxhash)"


def prompt_text(rec):
    """The text dedup --near compares, with --normalize none."""
    parts = []
    if rec.get("prompt") is not None and not rec.get("messages"):
        parts.append(rec["prompt"])
    msgs = rec.get("messages") or []
    system = rec.get("system")
    if system and (not msgs or msgs[0].get("role") != "system") and system.strip():
        msgs = [{"role": "system", "content": system}] + msgs
    for m in msgs:
        parts.append(m.get("role") or "")
        parts.append(m.get("content") or "")
    return "".join(p + "\n" for p in parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bands", type=int, default=14)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--shingle", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threshold", type=float, default=0.8)
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    np.seterr(over="ignore")

    k = args.bands * args.rows
    a, b, state = np.empty(k, np.uint64), np.empty(k, np.uint64), args.seed
    for i in range(k):
        state, ai = splitmix(state)
        state, bi = splitmix(state)
        a[i], b[i] = ai | 1, bi
    a, b = a[:, None], b[:, None]
    pows = np.array([pow(ROLL_MUL, e, 1 << 64) for e in range(args.shingle - 1, -1, -1)], np.uint64)
    need = int(args.threshold * k - 1e-9)
    while need < args.threshold * k - 1e-9:
        need += 1
    band_seed = np.array([((band + 1) * ROLL_MUL) & M64 for band in range(args.bands)], np.uint64)
    hash_word, hash_name = word_hasher()

    table = {}  # band key -> refs of kept prompts
    sigs = []  # signatures of kept prompts
    read = kept = near = 0
    out = sys.stdout.buffer
    inputs = args.files or ["-"]
    for name in inputs:
        f = sys.stdin.buffer if name == "-" else open(name, "rb")
        for line in f:
            if not line.strip():
                continue
            read += 1
            text = prompt_text(json.loads(line))
            wh = np.array([hash_word(w.encode()) for w in WORDS.findall(text)], np.uint64)
            n = len(wh)
            if n >= args.shingle:
                roll = np.zeros(n - args.shingle + 1, np.uint64)
                for j in range(args.shingle):
                    roll += wh[j:n - args.shingle + 1 + j] * pows[j]
                sh = fmix(roll)
            else:
                roll = np.uint64(0)
                for w in wh:
                    roll = roll * np.uint64(ROLL_MUL) + w
                sh = fmix(np.array([roll ^ np.uint64((n + 1) << 56)], np.uint64))
            sig = ((a * sh[None, :] + b).min(axis=1) >> np.uint64(32)).astype(np.uint32)
            keys = band_seed.copy()
            for v in sig.reshape(args.bands, args.rows).T.astype(np.uint64):
                keys = (keys ^ v) * np.uint64(0xFF51AFD7ED558CCD)
                keys ^= keys >> np.uint64(32)
            keys = [int(x) or 1 for x in fmix(keys)]
            cands = sorted({ref for key in keys for ref in table.get(key, ())})
            best = -1
            for ref in cands:
                agree = int(np.count_nonzero(sigs[ref] == sig))
                if agree > best:
                    best = agree
            if best >= need:
                near += 1
                continue
            ref = len(sigs)
            sigs.append(sig)
            for key in keys:
                table.setdefault(key, []).append(ref)
            kept += 1
            out.write(line if line.endswith(b"\n") else line + b"\n")
        if f is not sys.stdin.buffer:
            f.close()
    out.flush()
    print(f"minhash_numpy: read {read}, kept {kept}, near-duplicates {near} ({args.bands}x{args.rows}, "
          f"{args.shingle}-word shingles, word hash {hash_name})", file=sys.stderr)


if __name__ == "__main__":
    main()
