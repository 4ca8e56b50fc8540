/* libipt's packet decoder in a tight loop: the reference for benchmarks/bench_packets.py.
 *
 * Usage: pt_pkt_bench TRACE [REPEATS]
 * Reads TRACE into memory, then REPEATS times: allocate a pt_packet_decoder over it,
 * sync forward, call pt_pkt_next until the end of the buffer (after an error: sync forward
 * to the next PSB, as ptdump does), free the decoder. Prints one JSON object with the
 * packet and error counts and the best wall time of one pass.
 *
 * Compiled by the benchmark at run time: gcc -O2 pt_pkt_bench.c -lipt (Debian libipt-dev).
 */
#include <intel-pt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

static int one_pass(uint8_t *buf, size_t size, uint64_t *packets, uint64_t *errors)
{
	struct pt_packet_decoder *decoder;
	struct pt_config config;
	struct pt_packet packet;
	int status;

	pt_config_init(&config);
	config.begin = buf;
	config.end = buf + size;
	decoder = pt_pkt_alloc_decoder(&config);
	if (!decoder)
		return -1;
	*packets = *errors = 0;
	status = pt_pkt_sync_forward(decoder);
	while (status >= 0) {
		status = pt_pkt_next(decoder, &packet, sizeof(packet));
		if (status >= 0) {
			*packets += 1;
			continue;
		}
		if (status == -pte_eos)
			break;
		*errors += 1;
		status = pt_pkt_sync_forward(decoder);
	}
	pt_pkt_free_decoder(decoder);
	return 0;
}

int main(int argc, char **argv)
{
	uint64_t packets = 0, errors = 0;
	double best = 1e30;
	uint8_t *buf;
	long size;
	int repeats, i;
	FILE *file;

	if (argc < 2) {
		fprintf(stderr, "usage: %s TRACE [REPEATS]\n", argv[0]);
		return 2;
	}
	repeats = argc > 2 ? atoi(argv[2]) : 5;
	file = fopen(argv[1], "rb");
	if (!file || fseek(file, 0, SEEK_END) || (size = ftell(file)) <= 0) {
		fprintf(stderr, "%s: cannot read %s\n", argv[0], argv[1]);
		return 1;
	}
	rewind(file);
	buf = malloc((size_t) size);
	if (!buf || fread(buf, 1, (size_t) size, file) != (size_t) size) {
		fprintf(stderr, "%s: cannot read %s\n", argv[0], argv[1]);
		return 1;
	}
	fclose(file);
	for (i = 0; i < repeats; i++) {
		double start = now(), elapsed;

		if (one_pass(buf, (size_t) size, &packets, &errors) < 0) {
			fprintf(stderr, "%s: pt_pkt_alloc_decoder failed\n", argv[0]);
			return 1;
		}
		elapsed = now() - start;
		if (elapsed < best)
			best = elapsed;
	}
	printf("{\"bytes\": %ld, \"packets\": %llu, \"errors\": %llu, \"best_s\": %.9f}\n",
	       size, (unsigned long long) packets, (unsigned long long) errors, best);
	free(buf);
	return 0;
}
