// The jobs of the JSON file a client script is given (argv[2]), each run at once, one JSON line printed per result
// as it comes; the AG-UI client's own warnings and error logs muted (a result carries what matters).
import { readFileSync } from "node:fs";

export async function reportEach(run) {
  const jobs = JSON.parse(readFileSync(process.argv[2], "utf8"));
  console.warn = () => {};
  console.error = () => {};
  await Promise.all(jobs.map(async (job) => {
    const result = await run(job);
    process.stdout.write(JSON.stringify(result) + "\n");
  }));
}
