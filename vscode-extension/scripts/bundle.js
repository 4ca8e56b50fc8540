/**
 * Builds the extension's one shipped file, dist/extension.js (esbuild: src/extension.ts with
 * its npm dependencies inside, `vscode` left to VS Code), and dist/ThirdPartyNotices.txt: the
 * licence texts of the packages that went into it (their licences ask that the notice travel
 * with the code). Run by `npm run bundle`, which `vscode:prepublish` and `compile` run.
 */
'use strict';
const esbuild = require('esbuild');
const fs = require('fs');
const path = require('path');

const root = path.resolve(__dirname, '..');

async function main() {
    const result = await esbuild.build({
        absWorkingDir: root,
        entryPoints: ['src/extension.ts'],
        bundle: true,
        outfile: 'dist/extension.js',
        external: ['vscode'],
        format: 'cjs',
        platform: 'node',
        target: 'node18',
        minify: true,
        metafile: true,
        logLevel: 'warning',
    });
    const packages = new Set();
    for (const input of Object.keys(result.metafile.inputs)) {
        const match = /(?:^|\/)node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(input);
        if (match) { packages.add(match[1]); }
    }
    const notices = ['Third-party code bundled into dist/extension.js', ''];
    for (const name of [...packages].sort()) {
        const dir = path.join(root, 'node_modules', name);
        const manifest = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'));
        const licenceFile = fs.readdirSync(dir).find(f => /^licen[cs]e(\.(md|txt))?$/i.test(f));
        if (!licenceFile) {
            throw new Error(`${name} is bundled but has no LICENSE file to ship with it`);
        }
        notices.push('='.repeat(78), `${name} ${manifest.version} (${manifest.license})`, '='.repeat(78),
            fs.readFileSync(path.join(dir, licenceFile), 'utf8').trim(), '');
    }
    fs.writeFileSync(path.join(root, 'dist', 'ThirdPartyNotices.txt'), notices.join('\n'));
    const size = fs.statSync(path.join(root, 'dist', 'extension.js')).size;
    console.log(`dist/extension.js: ${(size / 1024).toFixed(1)} KB; notices of ${packages.size} package(s)`);
}

main().catch(error => {
    console.error(`bundle failed: ${error.message}`);
    process.exit(1);
});
