/*
 * ptdebug's DBI recording agent: runs inside the recorded process (Frida's JS runtime).
 *
 * Layer: adapter.capture, the in-process half of the DBI recorder (adapter/capture/dbi.py
 * is the other half, and the only one that talks to this file). It knows nothing of PT,
 * bundles or DAP: it writes, for every basic block a followed thread executes, the block's
 * id into a ring in shared memory, and, once per block when Frida's Stalker compiles it (a
 * transform in C, below), the block's start, last instruction and instruction count into a
 * table. No callout, no JS on the execution path, no Stalker event queue (which drops events
 * when it fills).
 *
 * Shared files (created and sized by dbi.py, mapped MAP_SHARED here and there):
 *   table   one per session. u64 at 0: block ids defined so far; u64 at 8: 1 once the table
 *           is full (blocks compiled after that run unrecorded). From byte 64, 24 bytes a
 *           block id: u64 start, u64 address of its last instruction, u32 instructions.
 *   ring    one per window (a followed thread). u64 at 0: blocks written (a count that never
 *           wraps). From byte 4096, 4 GiB of u32 block ids: block k of the window is at
 *           4096 + (4 k mod 2^32). The inline code computes the offset in a 32-bit register,
 *           so it wraps without a compare: nothing on the execution path touches RFLAGS.
 *           The file is sparse and dbi.py punches out what it has read.
 *
 * The code put before every block (x86-64; the 128-byte red zone below RSP is the
 * program's). The id is stored before the count is raised, so that a reader that sees the
 * count sees the ids below it (x86 stores become visible in program order):
 *   lea rsp, [rsp-128]; push rax; push rcx
 *   mov rax, RING; mov rcx, [rax]; lea ecx, [rcx*4]   ; the count's byte offset, mod 2^32
 *   mov dword [rax+rcx+4096], ID
 *   mov rcx, [rax]; lea rcx, [rcx+1]; mov [rax], rcx
 *   pop rcx; pop rax; lea rsp, [rsp+128]
 */
'use strict';

const libc = {
  open: new NativeFunction(Module.getGlobalExportByName('open'), 'int', ['pointer', 'int']),
  close: new NativeFunction(Module.getGlobalExportByName('close'), 'int', ['int']),
  mmap: new NativeFunction(Module.getGlobalExportByName('mmap'), 'pointer',
                           ['pointer', 'size_t', 'int', 'int', 'int', 'int64']),
  munmap: new NativeFunction(Module.getGlobalExportByName('munmap'), 'int', ['pointer', 'size_t']),
};
const O_RDWR = 2, PROT_READ_WRITE = 3, MAP_SHARED = 1;
const TABLE_ENTRY = 24, TABLE_HEADER = 64, RING_HEADER = 4096;

let table = null, tableBytes = 0, tableCapacity = 0;
const followed = new Map();   // tid -> {ring, ringBytes}
const retired = [];           // mappings of windows that ended, unmapped by release()

function mapShared(path, size) {
  const fd = libc.open(Memory.allocUtf8String(path), O_RDWR);
  if (fd < 0)
    throw new Error('cannot open ' + path + ' in the recorded process');
  const where = libc.mmap(ptr(0), size, PROT_READ_WRITE, MAP_SHARED, fd, 0);
  libc.close(fd);
  if (where.equals(ptr('0xffffffffffffffff')))
    throw new Error('cannot map ' + path + ' (' + size + ' bytes) in the recorded process');
  return where;
}

// The transform runs in C (Frida's CModule, compiled by its TinyCC when the agent loads): a
// JS transform costs ~0.1 ms a block Stalker compiles, which a Python thread entering a
// window (thousands of blocks: the interpreter, numpy) pays again in every window.
const transformer = new CModule(`
#include <gum/gumstalker.h>

typedef struct { guint8 * ring; guint8 * table; guint64 capacity; } Window;

void
transform (GumStalkerIterator * iterator, GumStalkerOutput * output, gpointer user_data)
{
  Window * w = user_data;
  const cs_insn * insn;
  GumX86Writer * cw = output->writer.x86;
  guint64 * defined = (guint64 *) w->table;
  guint64 start = 0, last = 0, id = 0;
  guint32 count = 0;
  gboolean recorded = FALSE;

  while (gum_stalker_iterator_next (iterator, &insn))
  {
    if (count == 0)
    {
      start = insn->address;
      /* not atomic: Stalker compiles a thread's blocks on that thread, so two threads
         followed at once could take one id; dbi.py follows one thread a session */
      id = defined[0];
      if (id < w->capacity)
      {
        static const guint8 before[] = { 0x48, 0x8d, 0x64, 0x24, 0x80, 0x50, 0x51 };
        guint8 store[] = { 0x48, 0x8b, 0x08, 0x8d, 0x0c, 0x8d, 0x00, 0x00, 0x00, 0x00,
                           0xc7, 0x84, 0x08, 0x00, 0x10, 0x00, 0x00, 0, 0, 0, 0 };
        static const guint8 after[] = { 0x48, 0x8b, 0x08, 0x48, 0x8d, 0x49, 0x01, 0x48, 0x89,
                                        0x08, 0x59, 0x58, 0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00,
                                        0x00, 0x00 };
        store[17] = id & 0xff;
        store[18] = (id >> 8) & 0xff;
        store[19] = (id >> 16) & 0xff;
        store[20] = (id >> 24) & 0xff;
        gum_x86_writer_put_bytes (cw, before, sizeof (before));
        gum_x86_writer_put_mov_reg_address (cw, GUM_X86_RAX, GUM_ADDRESS (w->ring));
        gum_x86_writer_put_bytes (cw, store, sizeof (store));
        gum_x86_writer_put_bytes (cw, after, sizeof (after));
        recorded = TRUE;
      }
      else
      {
        defined[1] = 1;   /* the table is full: this block runs unrecorded */
      }
    }
    last = insn->address;
    count++;
    gum_stalker_iterator_keep (iterator);
  }
  if (recorded)
  {
    guint8 * entry = w->table + TABLE_HEADER + id * TABLE_ENTRY;
    *(guint64 *) entry = start;
    *(guint64 *) (entry + 8) = last;
    *(guint32 *) (entry + 16) = count;
    defined[0] = id + 1;   /* after the entry: dbi.py reads the entries below this */
  }
}
`.replace(/TABLE_HEADER/g, String(TABLE_HEADER)).replace(/TABLE_ENTRY/g, String(TABLE_ENTRY)));

function windowData(ring) {
  const data = Memory.alloc(24);
  data.writePointer(ring);
  data.add(8).writePointer(table);
  data.add(16).writeU64(tableCapacity);
  return data;
}

function invalidate(tid, starts) {
  let failed = 0;
  for (const start of starts) {
    try {
      Stalker.invalidate(tid, ptr(start));
    } catch (e) {
      failed++;   // not compiled for this thread (any more): nothing to invalidate there
    }
  }
  return failed;
}

rpc.exports = {
  // The block table, shared by every window of the session (ids are never reused).
  setup(tablePath, bytes) {
    table = mapShared(tablePath, bytes);
    tableBytes = bytes;
    tableCapacity = Math.floor((bytes - TABLE_HEADER) / TABLE_ENTRY);
    return Process.id;
  },
  // Follow thread `tid`, its blocks into the ring file at ringPath (RING_HEADER + 4 GiB).
  follow(tid, ringPath, ringBytes) {
    if (followed.has(tid))
      throw new Error('thread ' + tid + ' is already recorded');
    const ring = mapShared(ringPath, ringBytes);
    Stalker.garbageCollect();
    const data = windowData(ring);
    followed.set(tid, {ring, ringBytes, data});
    Stalker.follow(tid, {transform: transformer.transform, data});
    return table.readU64().toNumber();
  },
  // Stop following `tid`. Stalker lets go of a thread when it next enters Stalker's
  // runtime, which a thread looping in blocks already compiled and linked never does (it
  // would run instrumented for ever): so the thread's blocks, `starts` (their addresses, from
  // the table), are invalidated too, and the next one it runs takes it back to the runtime.
  // dbi.py stops reading at the window's end, so blocks written after it are not used.
  unfollow(tid, starts) {
    const state = followed.get(tid);
    if (state === undefined)
      return false;
    Stalker.unfollow(tid);
    invalidate(tid, starts);
    followed.delete(tid);
    retired.push(state);
    return true;
  },
  // Invalidate more of an unfollowed thread's blocks (it kept running in others).
  invalidate(tid, starts) {
    return invalidate(tid, starts);
  },
  // Release everything: compiled code and the shared mappings. dbi.py calls it once the
  // ring counts of every window stood still (the threads have left Stalker's code, which
  // writes into the mappings), so that nothing of the recorder stays in the process.
  release(unmap) {
    for (const [tid, state] of followed) {
      Stalker.unfollow(tid);
      retired.push(state);
    }
    followed.clear();
    Stalker.flush();
    Stalker.garbageCollect();
    if (unmap) {
      for (const state of retired.splice(0))
        libc.munmap(state.ring, state.ringBytes);
      if (table !== null)
        libc.munmap(table, tableBytes);
      table = null;
    }
    return true;
  },
};
