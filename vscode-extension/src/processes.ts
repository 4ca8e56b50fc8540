/**
 * The processes an attach configuration can pick: running Python interpreters and Go programs,
 * with their command lines, read from /proc.
 *
 * Role: the listing behind the `ptdebug.pickProcess` command (`${command:pickProcess}` in
 * launch.json resolves through it). Layer: extension, no `vscode` import (extension.ts shows
 * the quick pick), so node:test runs it against real processes.
 *
 * What counts: a Python process is one whose executable (/proc/PID/exe, else argv[0]) is named
 * like an interpreter (`python3.11`, `python`, `pypy3`); a Go program is an ELF file with the
 * sections the Go linker always writes (`.go.buildinfo`, `.gopclntab`), even when stripped of
 * symbols with `-ldflags=-s`.
 */
import * as fs from 'fs';
import * as path from 'path';

export type ProcessKind = 'python' | 'go';

export interface ProcessEntry {
    pid: number;
    kind: ProcessKind;
    /** The executable's base name (`python3.11`, `server`). */
    name: string;
    /** argv joined by spaces, as `ps` shows it. */
    commandLine: string;
    /** /proc/PID/exe, or argv[0] when that link cannot be read. */
    executable: string;
}

const PYTHON_NAME = /^(python|pypy)(\d+(\.\d+)*)?[a-z]?$/;
/** Sections present in every binary the Go linker writes. */
const GO_SECTIONS = ['.go.buildinfo', '.gopclntab'];

/** Running Python and Go processes (of `kind` when given), by increasing pid. */
export function listProcesses(kind?: ProcessKind, procRoot = '/proc'): ProcessEntry[] {
    const goCache = new Map<string, boolean>();
    const entries: ProcessEntry[] = [];
    let names: string[];
    try {
        names = fs.readdirSync(procRoot);
    } catch (error) {
        throw new Error(`cannot list processes: ${procRoot} is not readable (${(error as Error).message})`);
    }
    for (const name of names) {
        if (!/^\d+$/.test(name)) { continue; }
        const entry = describeProcess(Number(name), procRoot, goCache);
        if (entry && (!kind || entry.kind === kind)) {
            entries.push(entry);
        }
    }
    return entries.sort((a, b) => a.pid - b.pid);
}

/** The entry of one process, or undefined when it is neither Python nor Go (or is gone). */
export function describeProcess(pid: number, procRoot = '/proc',
    goCache = new Map<string, boolean>()): ProcessEntry | undefined {
    const dir = path.join(procRoot, String(pid));
    let argv: string[];
    try {
        argv = fs.readFileSync(path.join(dir, 'cmdline'), 'latin1').split('\0').filter(a => a !== '');
    } catch {
        return undefined;  // ended meanwhile
    }
    if (argv.length === 0) { return undefined; }  // a kernel thread or a zombie
    let executable: string | undefined;
    try {
        executable = fs.readlinkSync(path.join(dir, 'exe')).replace(/ \(deleted\)$/, '');
    } catch {
        executable = undefined;  // another user's process: argv[0] is all there is
    }
    const shown = executable ?? argv[0];
    const base = path.basename(shown);
    const commandLine = argv.join(' ');
    if (PYTHON_NAME.test(base) || (!executable && PYTHON_NAME.test(path.basename(argv[0])))) {
        return { pid, kind: 'python', name: base, commandLine, executable: shown };
    }
    if (executable) {
        // Read through /proc/PID/exe: it opens the running file even if it was replaced since.
        const key = `${executable}\0${statKey(path.join(dir, 'exe'))}`;
        let isGo = goCache.get(key);
        if (isGo === undefined) {
            isGo = elfSectionNames(path.join(dir, 'exe')).some(s => GO_SECTIONS.includes(s));
            goCache.set(key, isGo);
        }
        if (isGo) {
            return { pid, kind: 'go', name: base, commandLine, executable };
        }
    }
    return undefined;
}

function statKey(file: string): string {
    try {
        const st = fs.statSync(file);
        return `${st.dev}:${st.ino}:${st.mtimeMs}`;
    } catch {
        return '';
    }
}

/** Section names of a 64-bit little-endian ELF file; [] for anything else or on error. */
export function elfSectionNames(file: string): string[] {
    let fd: number | undefined;
    try {
        fd = fs.openSync(file, 'r');
        const header = read(fd, 0, 64);
        if (header.length < 64 || header.readUInt32BE(0) !== 0x7f454c46 || header[4] !== 2 || header[5] !== 1) {
            return [];
        }
        const shoff = Number(header.readBigUInt64LE(0x28));
        const shentsize = header.readUInt16LE(0x3a);
        const shnum = header.readUInt16LE(0x3c);
        const shstrndx = header.readUInt16LE(0x3e);
        if (shoff === 0 || shnum === 0 || shstrndx >= shnum || shentsize < 64) { return []; }
        const table = read(fd, shoff, shentsize * shnum);
        const section = (i: number) => ({
            name: table.readUInt32LE(i * shentsize),
            offset: Number(table.readBigUInt64LE(i * shentsize + 0x18)),
            size: Number(table.readBigUInt64LE(i * shentsize + 0x20)),
        });
        const strtab = section(shstrndx);
        const strings = read(fd, strtab.offset, Math.min(strtab.size, 1 << 20));
        const names: string[] = [];
        for (let i = 0; i < shnum; i++) {
            const start = section(i).name;
            if (start >= strings.length) { continue; }
            const end = strings.indexOf(0, start);
            names.push(strings.toString('latin1', start, end < 0 ? strings.length : end));
        }
        return names;
    } catch {
        return [];
    } finally {
        if (fd !== undefined) { fs.closeSync(fd); }
    }
}

function read(fd: number, position: number, length: number): Buffer {
    const buffer = Buffer.alloc(length);
    const got = fs.readSync(fd, buffer, 0, length, position);
    return buffer.subarray(0, got);
}

/** The quick pick's items: name and pid, the kind, the full command line. */
export function processItems(entries: ProcessEntry[]): Array<{ label: string; description: string; detail: string; pid: number }> {
    return entries.map(entry => ({
        label: `${entry.name} (${entry.pid})`,
        description: entry.kind === 'go' ? 'Go' : 'Python',
        detail: entry.commandLine,
        pid: entry.pid,
    }));
}

/** Which kind of process an attach configuration wants: its backend, else any. */
export function wantedKind(config: { [key: string]: unknown } | undefined): ProcessKind | undefined {
    return config?.backend === 'python' || config?.backend === 'go' ? config.backend : undefined;
}
