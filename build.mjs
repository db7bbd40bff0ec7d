// Bundles each plugin into one self-contained executable under bin/.
// Every CNI call is a fresh process, so the bundle is minified (less to parse)
// and nothing is loaded at start-up that the call does not need.
import { build } from 'esbuild';
import { chmodSync } from 'node:fs';

const plugins = process.argv.slice(2).length ? process.argv.slice(2) : ['host-local'];

await Promise.all(
  plugins.map(async (name) => {
    const outfile = `bin/${name}`;
    await build({
      entryPoints: [`src/cmd/${name}.ts`],
      outfile,
      bundle: true,
      platform: 'node',
      format: 'cjs',
      target: 'node20',
      minify: true,
      legalComments: 'none',
      banner: { js: '#!/usr/bin/env node' },
      define: { __VERSION__: JSON.stringify(process.env.npm_package_version ?? '0.1.0') },
      // proper-lockfile's helpers for long-running programs cost ~15 ms per start; see src/shims.
      alias: { 'graceful-fs': './src/shims/graceful-fs.ts', 'signal-exit': './src/shims/signal-exit.ts' },
      logLevel: 'warning',
    });
    chmodSync(outfile, 0o755);
  }),
);
