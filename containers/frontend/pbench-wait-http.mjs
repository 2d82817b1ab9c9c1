// node pbench-wait-http.mjs URL [TIMEOUT_S] [PID]
// Health check: exit 0 as soon as URL answers with any HTTP status below 500; exit 1 after TIMEOUT_S seconds
// (default 120), or at once when PID (the server being waited for) is given and has exited.
const [url, timeoutArg = '120', pidArg] = process.argv.slice(2);
if (!url) {
  console.error('usage: pbench-wait-http.mjs URL [TIMEOUT_S] [PID]');
  process.exit(2);
}
const deadline = Date.now() + Number(timeoutArg) * 1000;
const start = Date.now();
let last = 'no answer yet';

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

while (Date.now() < deadline) {
  if (pidArg && !alive(Number(pidArg))) {
    console.error(`pbench-wait-http: server process ${pidArg} exited before ${url} answered (${last})`);
    process.exit(1);
  }
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(2000), redirect: 'manual' });
    if (res.status < 500) {
      console.log(`pbench-wait-http: ${url} answered ${res.status} after ${((Date.now() - start) / 1000).toFixed(1)}s`);
      process.exit(0);
    }
    last = `HTTP ${res.status}`;
  } catch (err) {
    last = String(err?.cause?.code || err?.name || err);
  }
  await new Promise((resolve) => setTimeout(resolve, 250));
}
console.error(`pbench-wait-http: ${url} did not answer within ${timeoutArg}s (${last})`);
process.exit(1);
