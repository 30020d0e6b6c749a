#!/usr/bin/env python3
"""A tiny local webhook receiver for the demo (docs/review.md, Notifications):
appends each POSTed JSON body as one line to a file and answers 200.

usage: notify-receiver.py PORT FILE
"""
import http.server
import json
import sys

port, out = int(sys.argv[1]), sys.argv[2]


class Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with open(out, "a", encoding="utf-8") as f:
            f.write(json.dumps(json.loads(body)) + "\n")
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


http.server.HTTPServer(("127.0.0.1", port), Receiver).serve_forever()
