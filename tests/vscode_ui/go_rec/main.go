// The Go program of tests/vscode_ui's data and record breakpoint tests (copied with go.mod
// into the test's workspace). main mixes a payload into a checksum (a record breakpoint at
// @payload with the window on main.checksum records it; a stop at @after is where Step Back
// walks back into it), then bump writes through a pointer into main's `hits` (Break on Value
// Change on `hits` stops on that write in main.bump). Lines are found by `// @name` markers.
package main

import "fmt"

//go:noinline
func checksum(data []byte) uint32 {
	var sum uint32 = 7 // @sum_init
	for _, b := range data {
		sum = sum*31 + uint32(b) // @mix
	}
	return sum // @sum_return
}

//go:noinline
func bump(counter *int, by int) {
	*counter += by // @bump_write
}

func main() {
	hits := 0                          // @main_first
	payload := []byte("usr-7a9f")      // @payload
	sum := checksum(payload)           // @call
	fmt.Printf("checksum %08x\n", sum) // @after
	bump(&hits, 2)                     // @bump
	fmt.Println("hits", hits)          // @end
}
