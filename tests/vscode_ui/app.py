"""The program tests/vscode_ui debugs through VS Code's UI (copied into each test's workspace).

score() gives a breakpoint a function and locals with known values (n 4, total 18 at
@score_ret); fill() writes into main()'s bytearray, the memory a data breakpoint ("Break on
Value Change" on `buf`) watches; a record breakpoint on @score_first records score(), and the
stop at @after is where Step Back walks back into it. Lines are found by `# @name` markers.
"""
import time


def weight(i):
    return i * 3  # @weight


def score(n):
    total = 0  # @score_first
    for i in range(n):
        total += weight(i)  # @score_add
    return total  # @score_ret


def fill(buf, rounds):
    for r in range(rounds):
        time.sleep(0.01)
        buf[0] = r + 1  # @write


def main():
    buf = bytearray(8)
    answer = score(4)  # @call
    print("score", answer)  # @after
    fill(buf, 3)  # @fill
    print("filled", list(buf))  # @end


if __name__ == "__main__":
    main()
