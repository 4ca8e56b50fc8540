/**
 * Shared helpers of the extension's tests: where the repository is, and source lines found by
 * their `# @name` markers (never by number).
 */
import * as fs from 'fs';
import * as path from 'path';

/** The repository root (tests run from out/test/). */
export const ROOT = path.resolve(__dirname, '..', '..', '..');
export const EXTENSION = path.join(ROOT, 'vscode-extension');
export const FIXTURES = path.join(ROOT, 'tests', 'fixtures', 'programs');

/** The interpreter with ptdebug installed: $PTDEBUG_PYTHON, else the repository's .venv. */
export const PYTHON = process.env.PTDEBUG_PYTHON || path.join(ROOT, '.venv', 'bin', 'python');

/** 1-based line of the `# @name` (or `// @name`) marker in `file`. */
export function markerLine(file: string, name: string): number {
    const lines = fs.readFileSync(file, 'utf8').split('\n');
    const pattern = new RegExp(`(#|//)\\s*@${name}\\b`);
    const index = lines.findIndex(line => pattern.test(line));
    if (index < 0) {
        throw new Error(`no @${name} marker in ${file}`);
    }
    return index + 1;
}
