// The main script of the standalone executable (dist/bin/*): a Node single
// executable application, so the host needs no Node.js. One file serves every
// plugin, hard-linked under each name: it runs the bundle of the name it was
// run as, from the assets build.mjs embedded beside this script, with the
// same code cache as the script executables. The node daemon starts with
// glibc's malloc settings for a long-running process (malloc-tunables.ts)
// and V8's (flannel/daemon/v8-flags.ts).
import { getAsset } from 'node:sea';
import { basename } from 'node:path';
import { runWithCodeCache } from './code-cache';
import { ignoreNodeEnvironment } from './environment';
import { startsDaemon, withDaemonTunables } from './malloc-tunables';
import { setDaemonV8Flags } from '../flannel/daemon/v8-flags';

/** Name run as -> [asset holding the bundle, code cache id, SHA-256 of the bundle]; written by build.mjs. */
declare const __BUNDLES__: Record<string, [string, string, string]>;

const name = basename(process.argv0);
const daemon = startsDaemon(name, process.argv.slice(2));
const tunables = daemon ? withDaemonTunables(process.env.GLIBC_TUNABLES) : undefined;
ignoreNodeEnvironment(true, process.env, tunables === undefined ? {} : { GLIBC_TUNABLES: tunables });
if (daemon) setDaemonV8Flags(); // before any bundle is compiled
const bundle = Object.hasOwn(__BUNDLES__, name) ? __BUNDLES__[name] : undefined;
if (bundle) {
  const [asset, id, sha256] = bundle;
  runWithCodeCache({ source: getAsset(asset, 'utf8'), id, sha256 }, { exports, require, module, filename: __filename, dirname: __dirname });
} else {
  const msg = `cni-ts: run as ${JSON.stringify(name)}; this executable must be named (or linked as) one of: ${Object.keys(__BUNDLES__).join(', ')}`;
  // A runtime reads errors from stdout; a person from stderr.
  if (process.env.CNI_COMMAND !== undefined) process.stdout.write(JSON.stringify({ cniVersion: '1.1.0', code: 999, msg }) + '\n');
  process.stderr.write(msg + '\n');
  process.exitCode = 1;
}
