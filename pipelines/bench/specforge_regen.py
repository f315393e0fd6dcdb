#!/usr/bin/env python3
"""A client that regenerates conversations the way SGLang SpecForge's
scripts/regenerate_train_data.py does, for pipelines/bench.sh to compare
infer --regenerate against. Python standard library only.

What it does, as that script does:
  - each conversation goes to the next server in turn (round robin), and
    all its turns run there, one after the other, in one worker thread;
  - each server has a fixed number of conversations in flight
    (--concurrency, default 64); when the server whose turn it is is full,
    the reader waits until one of that server's conversations ends, even
    if other servers have room;
  - system and user turns are kept, the original assistant turns dropped,
    and after every user turn the history so far is sent
    (/v1/chat/completions, non-streaming, no tools) and the answer
    appended;
  - no retries: a failed request makes the conversation an error record;
  - output lines are written as conversations finish, in that order.

Input: JSONL conversation records with "messages" (extract --turns all).
Output: the record with "messages" replaced by the regenerated ones and
"status": "success" (or "error" with "error"), one per line.
"""

import argparse
import json
import sys
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="default")
    p.add_argument("--server-address", nargs="+", required=True, help="host:port of each server")
    p.add_argument("--concurrency", type=int, default=64, help="conversations in flight per server")
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--input-file-path", required=True)
    p.add_argument("--output-file-path", required=True)
    return p.parse_args()


def ask(address, body):
    req = urllib.request.Request(
        "http://%s/v1/chat/completions" % address,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=3600) as resp:
        return json.loads(resp.read())


def regenerate(args, address, record):
    out = []
    for m in record.get("messages", []):
        role = m.get("role")
        if role == "system":
            out.append({"role": "system", "content": m.get("content", "")})
        elif role == "user":
            out.append({"role": "user", "content": m.get("content", "")})
            body = {
                "model": args.model,
                "messages": out,
                "max_tokens": args.max_tokens,
                "temperature": args.temperature,
                "stream": False,
            }
            try:
                answer = ask(address, body)
                text = answer["choices"][0]["message"]["content"]
            except Exception as e:  # as the original: the conversation fails
                record["status"] = "error"
                record["error"] = str(e)
                return record
            out.append({"role": "assistant", "content": text})
    record["messages"] = out
    record["status"] = "success"
    return record


def main():
    args = parse_args()
    servers = args.server_address
    pool = ThreadPoolExecutor(max_workers=args.concurrency * len(servers))
    in_flight = {s: [] for s in servers}
    done = threading.Condition()
    counts = {"success": 0, "error": 0}

    def finished(_):
        with done:
            done.notify_all()

    def write(out, fut):
        rec = fut.result()
        counts[rec["status"]] += 1
        out.write(json.dumps(rec, ensure_ascii=False) + "\n")

    turn = 0
    with open(args.input_file_path) as inp, open(args.output_file_path, "w") as out:
        for line in inp:
            if not line.strip():
                continue
            record = json.loads(line)
            server = servers[turn]
            turn = (turn + 1) % len(servers)
            # Wait for this server to have room, whatever the others have.
            with done:
                while len(in_flight[server]) >= args.concurrency:
                    ended = [f for f in in_flight[server] if f.done()]
                    if not ended:
                        done.wait()
                        continue
                    for f in ended:
                        in_flight[server].remove(f)
                        write(out, f)
            fut = pool.submit(regenerate, args, server, record)
            fut.add_done_callback(finished)
            in_flight[server].append(fut)
        for server in servers:
            for f in in_flight[server]:
                f.result()
                write(out, f)
    pool.shutdown()
    print("specforge_regen.py: %d conversations regenerated, %d failed" % (counts["success"], counts["error"]), file=sys.stderr)


if __name__ == "__main__":
    main()
