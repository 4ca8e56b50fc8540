"""The small "inference service" `ptdebug demo` debugs: a KV cache in a numpy array, a native
helper (kvcache.c, built by the demo and loaded with ctypes) that fills one slot per request,
and a background "compactor" thread with a bug: now and then it scribbles on slot 3.

Usage: service.py LIBKVCACHE.so [ROUNDS]. Lines are found by their `# @` markers.
"""
import ctypes
import sys
import threading
import time

import numpy as np

SLOTS, WIDTH = 8, 4
cache = np.zeros((SLOTS, WIDTH), dtype=np.float32)
stop = threading.Event()


def compactor():
    """Background maintenance of the cache. Its bug: it writes a stale value into slot 3."""
    passes = 0
    while not stop.is_set():
        time.sleep(0.02)
        passes += 1
        if passes % 3 == 1:
            cache[3, 0] = -1.0  # @corrupt


def handle(lib, request_id, slot, tokens):
    """Serve one request: the native helper writes its keys into the cache slot."""
    scale = lib.kv_update(cache.ctypes.data, slot, WIDTH, tokens)  # @request
    return scale  # @after_request


def main():
    lib = ctypes.CDLL(sys.argv[1])
    lib.kv_update.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_float]
    lib.kv_update.restype = ctypes.c_float
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    print(f"service: cache {cache.shape} at {cache.ctypes.data:#x}", flush=True)  # @ready
    worker = threading.Thread(target=compactor, name="compactor", daemon=True)
    worker.start()
    time.sleep(0.2)
    served = 0
    for request_id in range(1, rounds + 1):
        slot = request_id % SLOTS
        tokens = float(request_id % 5)
        handle(lib, request_id, slot, tokens)  # @serve
        served += 1
        time.sleep(0.01)
    stop.set()
    worker.join()
    print(f"service: served {served} requests", flush=True)  # @done


if __name__ == "__main__":
    main()
