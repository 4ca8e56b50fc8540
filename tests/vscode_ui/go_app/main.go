// The Go program tests/vscode_ui debugs through VS Code's UI (copied with go.mod into the
// test's workspace): main starts one worker goroutine that calls score(4) and waits for it on
// a channel, so a breakpoint at @score_ret stops a goroutine other than main's, with main's
// goroutine still listed (blocked in the receive) and locals of known value (n 4, total 18).
// With the argument "serve" it goes on scoring every 20 ms until killed: a process for the
// attach test to pick. Lines are found by `// @name` markers.
package main

import (
	"fmt"
	"os"
	"time"
)

//go:noinline
func score(n int) int {
	total := 0
	for i := 0; i < n; i++ {
		total += i * 3
	}
	return total // @score_ret
}

func worker(n int, done chan<- int) {
	done <- score(n) // @worker_call
}

func main() {
	done := make(chan int)
	go worker(4, done)
	fmt.Println("score", <-done) // @receive
	for len(os.Args) > 1 && os.Args[1] == "serve" {
		time.Sleep(20 * time.Millisecond)
		go worker(4, done)
		<-done
	}
}
