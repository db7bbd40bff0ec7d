// Our nftables table's name, and its removal: all a daemon without
// --network-policy loads of network policy (it removes a table a previous
// run with the flag left).
import { exec } from '../../iproute/exec';
import { notInstalled } from '../../iproute/masq-rule';

export const TABLE = 'flannel-netpol';

/** Removes the table; true when it was there. A node without nft (or nf_tables) has none. */
export async function removeTable(): Promise<boolean> {
  let run;
  try {
    run = await exec(['nft', 'delete', 'table', 'inet', TABLE], { allow: [1] });
  } catch (err) {
    if (notInstalled(err)) return false;
    throw err;
  }
  if (run.code === 0) return true;
  if (/No such file or directory|Operation not supported|Protocol not supported/.test(run.stderr)) return false;
  throw new Error(`nft delete table inet ${TABLE} failed: ${run.stderr.trim()}`);
}
