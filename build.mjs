// Bundles each plugin into one self-contained executable under bin/.
//
// Every CNI call is a fresh process, and V8 parses every function in the file
// it loads, run or not. So:
// - the operator CLI (commander, and for vxlan-flannel the daemon with its
//   etcd/grpc client) is bundled separately and embedded as a string, compiled
//   only when the executable runs as a CLI: a CNI call parses just plugin code;
// - the plugin bundle itself is embedded as a string in a small loader
//   (src/boot/code-cache.ts) that compiles it with a V8 code cache.
import { build } from 'esbuild';
import { createHash } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';

const plugins = process.argv.slice(2).length ? process.argv.slice(2) : ['host-local'];
mkdirSync('bin', { recursive: true });
const version = JSON.stringify(process.env.npm_package_version ?? '0.1.0');

const common = {
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node20',
  minify: true,
  legalComments: 'none',
  logLevel: 'warning',
};

async function cliSource(name) {
  const entry = `src/cli/${name}.ts`;
  if (!existsSync(entry)) return '';
  const out = await build({ ...common, entryPoints: [entry], write: false, define: { __VERSION__: version } });
  return out.outputFiles[0].text;
}

await Promise.all(
  plugins.map(async (name) => {
    const plugin = await build({
      ...common,
      entryPoints: [`src/cmd/${name}.ts`],
      write: false,
      define: { __VERSION__: version, __CLI_SOURCE__: JSON.stringify(await cliSource(name)) },
    });
    const payload = plugin.outputFiles[0].text;
    const id = `${name}-${createHash('sha256').update(payload).digest('hex').slice(0, 16)}`;
    const loader = await build({
      ...common,
      entryPoints: ['src/boot/code-cache.ts'],
      write: false,
      define: { __PAYLOAD__: JSON.stringify(payload), __PAYLOAD_ID__: JSON.stringify(id) },
    });
    const outfile = `bin/${name}`;
    writeFileSync(outfile, '#!/usr/bin/env node\n' + loader.outputFiles[0].text);
    chmodSync(outfile, 0o755);
  }),
);
