#!/usr/bin/env python3
"""How long headless Chromium takes to show the first screen of a report page.

    scripts/measure-first-paint.py REPORT.html [--runs 5] [--screenshot first-screen.png]

Starts Chromium once (headless, a 1400 x 1000 window, a fresh profile), then for each run opens
a new tab, navigates it to the file and reads the page's own clock (the Performance API,
relative to the navigation's start): first-contentful-paint (the first screen drawn),
domContentLoaded and load. Prints one line per run and the median of each. With --screenshot,
saves the first screen of the last run.

Needs chromium on PATH (Debian's package) and the websocket-client package from PyPI
(`pip install websocket-client`).
"""

import argparse
import base64
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import urllib.request

try:
    import websocket  # websocket-client
except ImportError:
    sys.exit("needs websocket-client: pip install websocket-client")

FLAGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--no-first-run", "--no-default-browser-check", "--hide-scrollbars",
    "--window-size=1400,1000", "--remote-debugging-port=0",
    "--remote-debugging-address=127.0.0.1",
]

# Waits for the first-contentful-paint entry (the Performance API records it once the frame is
# presented, which can be after the load event) and reads it with the navigation's timings.
TIMINGS = """
new Promise(resolve => new PerformanceObserver((list, observer) => {
  const fcp = list.getEntriesByName('first-contentful-paint')[0];
  if (!fcp) return;
  observer.disconnect();
  const nav = performance.getEntriesByType('navigation')[0];
  resolve(JSON.stringify({
    fcp: fcp.startTime, dcl: nav.domContentLoadedEventEnd, load: nav.loadEventEnd,
    nodes: document.getElementsByTagName('*').length}));
}).observe({type: 'paint', buffered: true}))
"""


class Tab:
    def __init__(self, url):
        self.socket = websocket.create_connection(url, timeout=120, suppress_origin=True)
        self.next_id = 0

    def call(self, method, **params):
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def wait_event(self, name):
        while True:
            message = json.loads(self.socket.recv())
            if message.get("method") == name:
                return message["params"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--screenshot")
    args = parser.parse_args()
    page = pathlib.Path(args.report).resolve()
    if not page.is_file():
        sys.exit(f"{args.report}: no such file")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        sys.exit("chromium is not on PATH (apt-get install chromium)")
    profile = tempfile.mkdtemp(prefix="first-paint-")
    browser = subprocess.Popen(
        [chromium, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        port = None
        for line in browser.stderr:
            found = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
            if found:
                port = found.group(1)
                break
        if port is None:
            sys.exit("chromium did not say where its DevTools listen")
        results = []
        for run in range(args.runs):
            request = urllib.request.Request(f"http://127.0.0.1:{port}/json/new?about:blank",
                                             method="PUT")
            target = json.load(urllib.request.urlopen(request))
            tab = Tab(target["webSocketDebuggerUrl"])
            tab.call("Page.enable")
            # A tab in the background is not drawn, so it would never paint.
            tab.call("Page.bringToFront")
            tab.call("Page.navigate", url=page.as_uri())
            tab.wait_event("Page.loadEventFired")
            timing = json.loads(tab.call("Runtime.evaluate", expression=TIMINGS,
                                         awaitPromise=True)["result"]["value"])
            results.append(timing)
            print(f"run {run + 1}: first-contentful-paint {timing['fcp']:.0f} ms, "
                  f"DOMContentLoaded {timing['dcl']:.0f} ms, load {timing['load']:.0f} ms "
                  f"({timing['nodes']} elements)")
            if args.screenshot and run == args.runs - 1:
                shot = tab.call("Page.captureScreenshot", format="png")
                pathlib.Path(args.screenshot).write_bytes(base64.b64decode(shot["data"]))
            tab.call("Page.close")
        median = lambda key: statistics.median(r[key] for r in results)
        print(f"median of {len(results)}: first-contentful-paint {median('fcp'):.0f} ms, "
              f"DOMContentLoaded {median('dcl'):.0f} ms, load {median('load'):.0f} ms; "
              f"page {page.stat().st_size} bytes")
    finally:
        browser.kill()
        browser.wait()
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    main()
