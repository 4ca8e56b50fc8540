"""A Python process for tests/vscode_ui's attach test to pick in the extension's process
picker: it scores every 20 ms until killed. Lines are found by `# @name` markers."""
import time


def score(n):
    total = 0
    for i in range(n):
        total += i * 3
    return total  # @serve_ret


if __name__ == "__main__":
    print("serving", score(4), flush=True)
    while True:
        score(4)
        time.sleep(0.02)
