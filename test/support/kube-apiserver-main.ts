// The stand-in API server as a process of its own, so that it can run inside
// a test's network namespace (`nsenter --net=PATH node <bundle> OPTIONS.json`).
// OPTIONS.json holds KubeApiServerOptions (PEM texts included) and must name
// a controlSocket; once listening, the server prints one JSON line with its
// URL on stdout. SIGTERM stops it.
import { readFileSync } from 'node:fs';
import { KubeApiServerOptions, startKubeApiServer } from './kube-apiserver';

const opts = JSON.parse(readFileSync(process.argv[2], 'utf8')) as KubeApiServerOptions;
if (!opts.controlSocket) throw new Error('the options must name a controlSocket');
const server = await startKubeApiServer(opts);
process.stdout.write(JSON.stringify({ url: server.url }) + '\n');
process.on('SIGTERM', () => {
  void server.stop().then(() => process.exit(0));
});
