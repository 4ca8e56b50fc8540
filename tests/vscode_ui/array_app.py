"""The numpy program of tests/vscode_ui's element data breakpoint: main() makes a float64
array of four zeros and fill() writes its element 2 three times (1.0, 2.0, 3.0), so "Break on
Value Change" on that element in the Variables view stops on the first write. Lines are found
by `# @name` markers."""
import numpy as np


def fill(values, rounds):
    for r in range(rounds):
        values[2] = r + 1  # @array_write


def main():
    values = np.zeros(4)
    fill(values, 3)  # @array_fill
    print("filled", values.tolist())


if __name__ == "__main__":
    main()
