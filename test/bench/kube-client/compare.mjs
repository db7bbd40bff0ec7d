// Which Kubernetes client the vxlan-flannel daemon loads: ours
// (src/flannel/kube) or @kubernetes/client-node, measured in one run for the
// daemon's needs: load, read a kubeconfig, list the Nodes, open a watch and
// get its first event. Each probe is bundled as build.mjs bundles the daemon
// (esbuild, minified, CommonJS) and run as a fresh process against the
// stand-in API server (HTTPS, a bearer token, 100 Nodes as kube-flannel
// annotates them). Figures: bundle size, milliseconds from process start
// (performance.now()) to loaded / listed / first watch event, wall time of
// the whole process, peak RSS; medians, beside `node -e 0`.
//
// Not part of `make bench`: it needs @kubernetes/client-node installed
// beside the project, which the project does not depend on:
//   npm install --prefix /tmp/kcn --no-save @kubernetes/client-node@1.4.0
//   KUBE_CLIENT_NODE_DIR=/tmp/kcn node test/bench/kube-client/compare.mjs [RUNS]
// (1.4.0: 2.x needs Node 22.19+, through undici 8.)
import { build } from 'esbuild';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { fmt, median, ratio, table } from '../lib.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const support = join(here, '../../support');
const runs = Number(process.argv[2] ?? 21);
const cnDir = process.env.KUBE_CLIENT_NODE_DIR;
if (!cnDir || !existsSync(join(cnDir, 'node_modules/@kubernetes/client-node'))) {
  console.error('KUBE_CLIENT_NODE_DIR must name a directory holding node_modules/@kubernetes/client-node (see the header of this file)');
  process.exit(2);
}
const clientNodeVersion = JSON.parse(readFileSync(join(cnDir, 'node_modules/@kubernetes/client-node/package.json'), 'utf8')).version;

const tmp = mkdtempSync(join(tmpdir(), 'kube-client-bench-'));
let server;
try {
  // the daemon's bundle options (build.mjs)
  const daemonLike = { bundle: true, platform: 'node', format: 'cjs', target: 'node20', minify: true, legalComments: 'none', logLevel: 'warning' };
  await build({ ...daemonLike, entryPoints: [join(here, 'probe-ours.ts')], outfile: join(tmp, 'ours.js') });
  await build({ ...daemonLike, entryPoints: [join(here, 'probe-client-node.mjs')], outfile: join(tmp, 'client-node.js'), nodePaths: [join(cnDir, 'node_modules')] });
  await build({ entryPoints: [join(support, 'pki.ts'), join(support, 'kubeconfig.ts'), join(support, 'kube-apiserver-main.ts')], bundle: true, platform: 'node', format: 'esm', outdir: join(tmp, 'support'), outExtension: { '.js': '.mjs' }, logLevel: 'warning' });
  const { TestCA } = await import(join(tmp, 'support/pki.mjs'));
  const { kubeconfigYaml } = await import(join(tmp, 'support/kubeconfig.mjs'));

  const ca = new TestCA(join(tmp, 'pki'));
  const cert = ca.server('kube-apiserver', ['127.0.0.1']);
  const token = 'bench-token';
  const control = join(tmp, 'control.sock');
  writeFileSync(join(tmp, 'options.json'), JSON.stringify({ tls: { cert: cert.certPem, key: cert.keyPem }, users: [{ name: 'flannel', token, role: 'flannel' }], controlSocket: control }));
  server = spawn(process.execPath, [join(tmp, 'support/kube-apiserver-main.mjs'), join(tmp, 'options.json')], { stdio: ['ignore', 'pipe', 'inherit'] });
  const url = await new Promise((resolve, reject) => {
    server.stdout.once('data', (b) => resolve(JSON.parse(String(b)).url));
    server.once('exit', (code) => reject(new Error(`the stand-in API server exited ${code}`)));
  });
  const hook = (name, args) =>
    new Promise((resolve, reject) => {
      const req = http.request({ socketPath: control, path: `/_test/${name}`, method: 'POST' }, (res) => (res.resume(), res.on('end', resolve)));
      req.on('error', reject);
      req.end(JSON.stringify(args));
    });
  for (let i = 1; i <= 100; i++) {
    await hook('createNode', [
      {
        metadata: {
          name: `node-${i}`,
          annotations: {
            'flannel.alpha.coreos.com/backend-data': `{"VNI":1,"VtepMAC":"0a:58:0a:f4:${(i >> 8).toString(16).padStart(2, '0')}:${(i & 255).toString(16).padStart(2, '0')}"}`,
            'flannel.alpha.coreos.com/backend-type': 'vxlan',
            'flannel.alpha.coreos.com/kube-subnet-manager': 'true',
            'flannel.alpha.coreos.com/public-ip': `192.168.${i >> 8}.${i & 255}`,
          },
        },
        spec: { podCIDR: `10.244.${i}.0/24`, podCIDRs: [`10.244.${i}.0/24`] },
        status: { conditions: [{ type: 'Ready', status: 'True' }], nodeInfo: { kubeletVersion: 'v1.32.1' } },
      },
    ]);
  }
  await hook('patchNode', ['node-1', { metadata: { labels: { touched: 'yes' } } }]);
  const kubeconfig = join(tmp, 'kubeconfig');
  writeFileSync(kubeconfig, kubeconfigYaml({ server: url, caPem: ca.caPem, token }));

  const probe = (file) => {
    const t0 = process.hrtime.bigint();
    const r = spawnSync(process.execPath, [file, kubeconfig], { encoding: 'utf8', env: { PATH: process.env.PATH } });
    const wallMs = Number(process.hrtime.bigint() - t0) / 1e6;
    if (r.status !== 0) throw new Error(`${file} exited ${r.status}: ${r.stdout}${r.stderr}`);
    const out = JSON.parse(r.stdout.trim().split('\n').pop());
    if (out.nodes !== undefined && out.nodes !== 100) throw new Error(`${file} listed ${out.nodes} nodes, not 100`);
    return { ...out, wallMs };
  };
  const baseline = join(tmp, 'baseline.js');
  writeFileSync(baseline, 'process.stdout.write(JSON.stringify({ maxRssKB: process.resourceUsage().maxRSS }) + "\\n");\n');
  const probes = { ours: join(tmp, 'ours.js'), [`@kubernetes/client-node ${clientNodeVersion}`]: join(tmp, 'client-node.js'), 'node (empty script)': baseline };
  const results = Object.fromEntries(Object.keys(probes).map((k) => [k, []]));
  for (const file of Object.values(probes)) probe(file); // warm the page cache
  for (let i = 0; i < runs; i++) for (const [name, file] of Object.entries(probes)) results[name].push(probe(file));

  const m = (name, key) => median(results[name].map((r) => r[key]));
  const rows = [['client', 'bundle', 'loaded', 'listed', 'watch event', 'process wall', 'peak RSS']];
  for (const [name, file] of Object.entries(probes)) {
    const loaded = name.startsWith('node') ? '' : fmt(m(name, 'loadedMs'));
    rows.push([
      name,
      name.startsWith('node') ? '' : `${(statSync(file).size / 1024).toFixed(0)} KiB`,
      loaded,
      name.startsWith('node') ? '' : fmt(m(name, 'listedMs')),
      name.startsWith('node') ? '' : fmt(m(name, 'watchingMs')),
      fmt(m(name, 'wallMs')),
      `${(m(name, 'maxRssKB') / 1024).toFixed(1)} MiB`,
    ]);
  }
  console.log(`medians of ${runs} runs each, Node ${process.version}; times from process start`);
  table(rows);
  const cn = `@kubernetes/client-node ${clientNodeVersion}`;
  console.log(
    `client-node / ours: bundle ${ratio(statSync(probes[cn]).size, statSync(probes.ours).size)}, watch event ${ratio(m(cn, 'watchingMs'), m('ours', 'watchingMs'))}, ` +
      `peak RSS ${ratio(m(cn, 'maxRssKB'), m('ours', 'maxRssKB'))} (${((m(cn, 'maxRssKB') - m('ours', 'maxRssKB')) / 1024).toFixed(1)} MiB more)`,
  );
} finally {
  server?.kill('SIGTERM');
  rmSync(tmp, { recursive: true, force: true });
}
