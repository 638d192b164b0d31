#!/usr/bin/env python3
"""A toy upstream for trying oncerpc flows: POST /<step> answers
{"step": <step>, "n": <calls to that step so far>, "input": <the JSON body>}.
Set FAIL=1 in the environment to make every call answer 500.

    python3 examples/upstream.py 9000
"""
import json
import os
import sys
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

calls = Counter()


class Step(BaseHTTPRequestHandler):
    def do_POST(self):
        step = self.path.strip("/") or "root"
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        calls[step] += 1
        print(f"{step} #{calls[step]} key={self.headers.get('X-Idempotency-Key')}", file=sys.stderr)
        if os.environ.get("FAIL") == "1":
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b"upstream exploded")
            return
        out = json.dumps({"step": step, "n": calls[step], "input": json.loads(body or b"null")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 9000
    ThreadingHTTPServer(("127.0.0.1", port), Step).serve_forever()
