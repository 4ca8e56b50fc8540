/* libipt's instruction and block decoders over one stream: the reference the
 * instruction-flow benchmark (benchmarks/bench_insn.py) times ptdebug against.
 *
 * Compiled at benchmark time against Debian's libipt (-lipt). It decodes the
 * whole stream as ptxed does (sync, drain events, next until an error, resync)
 * and stores nothing, counting instructions (the block decoder: the sum of
 * pt_block.ninsn). Prints one JSON line: {"insns", "events", "errors", "seconds"}.
 * `ips` is the instruction decoder printing every IP (lower-case hex, one a
 * line, through stdio's buffered stdout, as ptxed prints): the reference of
 * `ptdebug decode --format ips` (benchmarks/bench_decode_output.py); its JSON
 * line then goes to stderr.
 *
 *   insn_driver insn|ips|blk TRACE FAMILY MODEL MTC_FREQ NOM_FREQ EAX EBX REPEAT \
 *               FILE:OFFSET:SIZE:VADDR...
 */
#include <intel-pt.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint8_t *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf;
    long n;

    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc(n ? n : 1);
    if (buf && fread(buf, 1, n, f) != (size_t) n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = (size_t) n;
    return buf;
}

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct counts { uint64_t insns, events, errors; };

static void run_insn(struct pt_config *cfg, struct pt_image *image, struct counts *c, int print)
{
    struct pt_insn_decoder *dec = pt_insn_alloc_decoder(cfg);
    int status;

    pt_insn_set_image(dec, image);
    for (;;) {
        status = pt_insn_sync_forward(dec);
        if (status < 0)
            break;
        for (;;) {
            struct pt_insn insn;

            while (status & pts_event_pending) {
                struct pt_event ev;

                status = pt_insn_event(dec, &ev, sizeof(ev));
                if (status < 0)
                    break;
                c->events++;
            }
            if (status < 0 || (status & pts_eos))
                break;
            status = pt_insn_next(dec, &insn, sizeof(insn));
            if (insn.iclass != ptic_error) {
                c->insns++;
                if (print)
                    printf("%" PRIx64 "\n", insn.ip);
            }
            if (status < 0)
                break;
        }
        if (status == -pte_eos || (status >= 0 && (status & pts_eos)))
            break;
        c->errors++;
    }
    pt_insn_free_decoder(dec);
}

static void run_blk(struct pt_config *cfg, struct pt_image *image, struct counts *c)
{
    struct pt_block_decoder *dec = pt_blk_alloc_decoder(cfg);
    int status;

    pt_blk_set_image(dec, image);
    for (;;) {
        status = pt_blk_sync_forward(dec);
        if (status < 0)
            break;
        for (;;) {
            struct pt_block blk;

            while (status & pts_event_pending) {
                struct pt_event ev;

                status = pt_blk_event(dec, &ev, sizeof(ev));
                if (status < 0)
                    break;
                c->events++;
            }
            if (status < 0 || (status & pts_eos))
                break;
            status = pt_blk_next(dec, &blk, sizeof(blk));
            c->insns += blk.ninsn;
            if (status < 0)
                break;
        }
        if (status == -pte_eos || (status >= 0 && (status & pts_eos)))
            break;
        c->errors++;
    }
    pt_blk_free_decoder(dec);
}

int main(int argc, char **argv)
{
    struct pt_image_section_cache *iscache;
    struct pt_image *image;
    struct pt_config cfg;
    struct counts c;
    uint8_t *trace;
    size_t size;
    double start, best = 1e30;
    int i, rep, repeat;

    if (argc < 11) {
        fprintf(stderr, "usage: %s insn|ips|blk TRACE FAMILY MODEL MTC_FREQ NOM_FREQ EAX EBX REPEAT "
                "FILE:OFFSET:SIZE:VADDR...\n", argv[0]);
        return 2;
    }
    trace = read_file(argv[2], &size);
    if (!trace) {
        fprintf(stderr, "cannot read %s\n", argv[2]);
        return 2;
    }
    pt_config_init(&cfg);
    cfg.begin = trace;
    cfg.end = trace + size;
    cfg.cpu.vendor = pcv_intel;
    cfg.cpu.family = (uint16_t) strtoul(argv[3], NULL, 0);
    cfg.cpu.model = (uint8_t) strtoul(argv[4], NULL, 0);
    pt_cpu_errata(&cfg.errata, &cfg.cpu);
    cfg.mtc_freq = (uint8_t) strtoul(argv[5], NULL, 0);
    cfg.nom_freq = (uint8_t) strtoul(argv[6], NULL, 0);
    cfg.cpuid_0x15_eax = (uint32_t) strtoul(argv[7], NULL, 0);
    cfg.cpuid_0x15_ebx = (uint32_t) strtoul(argv[8], NULL, 0);
    repeat = atoi(argv[9]);

    /* Sections go through an image section cache, as ptxed loads them. */
    iscache = pt_iscache_alloc(NULL);
    image = pt_image_alloc(NULL);
    for (i = 10; i < argc; i++) {
        char path[4096];
        uint64_t off, sz, vaddr;
        int isid;

        if (sscanf(argv[i], "%4095[^:]:%" SCNi64 ":%" SCNi64 ":%" SCNi64, path, &off, &sz, &vaddr) != 4) {
            fprintf(stderr, "bad section %s\n", argv[i]);
            return 2;
        }
        isid = pt_iscache_add_file(iscache, path, off, sz, vaddr);
        if (isid < 0 || pt_image_add_cached(image, iscache, isid, NULL) < 0) {
            fprintf(stderr, "cannot map %s\n", argv[i]);
            return 2;
        }
    }
    for (rep = 0; rep < repeat; rep++) {
        memset(&c, 0, sizeof(c));
        start = now();
        if (!strcmp(argv[1], "blk"))
            run_blk(&cfg, image, &c);
        else
            run_insn(&cfg, image, &c, !strcmp(argv[1], "ips"));
        if (now() - start < best)
            best = now() - start;
    }
    fflush(stdout);
    fprintf(strcmp(argv[1], "ips") ? stdout : stderr,
            "{\"insns\": %" PRIu64 ", \"events\": %" PRIu64 ", \"errors\": %" PRIu64
            ", \"seconds\": %.6f}\n", c.insns, c.events, c.errors, best);
    pt_image_free(image);
    pt_iscache_free(iscache);
    free(trace);
    return 0;
}
