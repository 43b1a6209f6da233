// Mints a JWT with the `jose` package for each job of a JSON file and prints one JSON line per job: {"label",
// "token"}. A job is {"label", "alg", "kid", "claims", and "jwk" (a private JWK, for RS256/ES256) or "secret" (an
// HMAC key as UTF-8 text)}; alg "none" makes an unsigned token.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const require = createRequire(process.env.GATEWAY_NODE_MODULES + "/");
const { SignJWT, UnsecuredJWT, importJWK } = await import(pathToFileURL(require.resolve("jose")).href);

async function mint(job) {
  if (job.alg === "none") return new UnsecuredJWT(job.claims).encode();
  const key = job.jwk ? await importJWK(job.jwk, job.alg) : new TextEncoder().encode(job.secret);
  const header = job.kid === undefined ? { alg: job.alg } : { alg: job.alg, kid: job.kid };
  return new SignJWT(job.claims).setProtectedHeader(header).sign(key);
}

const jobs = JSON.parse(readFileSync(process.argv[2], "utf8"));
for (const job of jobs) {
  process.stdout.write(JSON.stringify({ label: job.label, token: await mint(job) }) + "\n");
}
