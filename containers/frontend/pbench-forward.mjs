// node pbench-forward.mjs LOCAL_PORT=HOST:PORT [...]
// Plain TCP forwards from 127.0.0.1:LOCAL_PORT to HOST:PORT, so that a frontend (and its tests) that hard-code
// http://localhost:8000 reach the backend-serve container of the task's network without any edit.
import net from 'node:net';

const specs = process.argv.slice(2);
if (!specs.length) {
  console.error('usage: pbench-forward.mjs LOCAL_PORT=HOST:PORT [...]');
  process.exit(2);
}
for (const spec of specs) {
  const match = /^(\d+)=([^:]+):(\d+)$/.exec(spec);
  if (!match) {
    console.error(`pbench-forward: bad forward ${spec}; want LOCAL_PORT=HOST:PORT`);
    process.exit(2);
  }
  const [, localPort, host, port] = match;
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(port), host);
    client.pipe(upstream).pipe(client);
    const close = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', close);
    upstream.on('error', close);
  });
  server.on('error', (err) => {
    console.error(`pbench-forward: ${spec}: ${err.message}`);
    process.exit(1);
  });
  server.listen(Number(localPort), '127.0.0.1', () => console.log(`pbench-forward: 127.0.0.1:${localPort} -> ${host}:${port}`));
}
