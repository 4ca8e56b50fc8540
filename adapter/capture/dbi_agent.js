/*
 * ptdebug's DBI recording agent: runs inside the recorded process (Frida's JS runtime).
 *
 * Layer: adapter.capture, the in-process half of the DBI recorder (adapter/capture/dbi.py
 * is the other half, and the only one that talks to this file). It knows nothing of PT,
 * bundles or DAP: it writes, for every basic block a followed thread executes, the block's
 * id into a ring in shared memory, and, once per block when Frida's Stalker compiles it,
 * the block's start, last instruction and instruction count into a table. No callout, no
 * JS on the execution path, no Stalker event queue (which drops events when it fills).
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

let table = null, tableBytes = 0, tableCapacity = 0, nextId = 0;
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

function u32le(value) {
  return [value & 0xff, (value >>> 8) & 0xff, (value >>> 16) & 0xff, (value >>> 24) & 0xff];
}

function transformFor(ring) {
  return function (iterator) {
    let insn = iterator.next();
    const start = insn.address;
    const id = nextId;
    if (id >= tableCapacity) {
      // out of ids: the block runs unrecorded, and the table says it is full (dbi.py ends
      // the window there, as partial)
      do { iterator.keep(); } while (iterator.next() !== null);
      table.add(8).writeU64(1);
      return;
    }
    nextId = id + 1;
    iterator.putBytes([0x48, 0x8d, 0x64, 0x24, 0x80, 0x50, 0x51]);
    iterator.putMovRegAddress('rax', ring);
    iterator.putBytes([0x48, 0x8b, 0x08, 0x8d, 0x0c, 0x8d, 0x00, 0x00, 0x00, 0x00,
                       0xc7, 0x84, 0x08, 0x00, 0x10, 0x00, 0x00].concat(u32le(id)));
    iterator.putBytes([0x48, 0x8b, 0x08, 0x48, 0x8d, 0x49, 0x01, 0x48, 0x89, 0x08,
                       0x59, 0x58, 0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00]);
    let count = 0, last = start;
    do {
      last = insn.address;
      count++;
      iterator.keep();
    } while ((insn = iterator.next()) !== null);
    const entry = table.add(TABLE_HEADER + id * TABLE_ENTRY);
    entry.writeU64(uint64(start.toString()));
    entry.add(8).writeU64(uint64(last.toString()));
    entry.add(16).writeU32(count);
    table.writeU64(nextId);   // after the entry: dbi.py reads the entries below this
  };
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
    followed.set(tid, {ring, ringBytes});
    Stalker.garbageCollect();
    Stalker.follow(tid, {transform: transformFor(ring)});
    return nextId;
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
    for (const start of starts) {
      try {
        Stalker.invalidate(tid, ptr(start));
      } catch (e) {
        // the thread has already left Stalker (its code is gone): nothing to invalidate
        break;
      }
    }
    followed.delete(tid);
    retired.push(state);
    return true;
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
