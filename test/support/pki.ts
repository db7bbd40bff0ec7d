// A throwaway certificate authority for TLS tests, made with openssl (argv
// only, no shell): a CA, server certificates with the names and addresses
// they are valid for, and client certificates whose CN names the user.
// EC P-256 keys: quick to make, and every client we test (Node, Go) takes them.
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface CertFiles {
  cert: string;
  key: string;
  /** The PEM texts of both files. */
  certPem: string;
  keyPem: string;
}

const EC = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

export class TestCA {
  readonly caFile: string;
  readonly caPem: string;
  private readonly caKey: string;

  /** A new CA in `dir` (created if missing), called `name` in its subject. */
  constructor(
    readonly dir: string,
    name = 'cni-ts-test-ca',
  ) {
    mkdirSync(dir, { recursive: true });
    this.caFile = join(dir, `${name}.pem`);
    this.caKey = join(dir, `${name}-key.pem`);
    openssl(['req', '-x509', ...EC, '-keyout', this.caKey, '-out', this.caFile, '-days', '2', '-subj', `/CN=${name}`]);
    this.caPem = readFileSync(this.caFile, 'utf8');
  }

  /** A server certificate valid for these IP addresses and DNS names. */
  server(name: string, ips: string[], dnsNames: string[] = []): CertFiles {
    const san = [...ips.map((ip) => `IP:${ip}`), ...dnsNames.map((d) => `DNS:${d}`)].join(',');
    return this.issue(name, `subjectAltName=${san}\nextendedKeyUsage=serverAuth\n`);
  }

  /** A client certificate for user `cn`. */
  client(cn: string): CertFiles {
    return this.issue(cn, 'extendedKeyUsage=clientAuth\n');
  }

  private issue(cn: string, extensions: string): CertFiles {
    const f = (suffix: string) => join(this.dir, `${cn.replace(/[^A-Za-z0-9_.-]/g, '_')}${suffix}`);
    writeFileSync(f('.ext'), extensions);
    openssl(['req', ...EC, '-keyout', f('-key.pem'), '-out', f('.csr'), '-subj', `/CN=${cn}`]);
    openssl(['x509', '-req', '-in', f('.csr'), '-CA', this.caFile, '-CAkey', this.caKey, '-CAcreateserial', '-days', '2', '-out', f('.pem'), '-extfile', f('.ext')]);
    return { cert: f('.pem'), key: f('-key.pem'), certPem: readFileSync(f('.pem'), 'utf8'), keyPem: readFileSync(f('-key.pem'), 'utf8') };
  }
}

function openssl(args: string[]): void {
  execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
}
