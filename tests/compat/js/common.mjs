// What the JavaScript drivers share: the report they print, the event log they wait on, and
// a live microphone. Each driver is run by tests/compat/test_js_clients.py as
// `node <driver>.mjs <scenario> <json arguments>` and prints one JSON report as its last line.

import { readFileSync } from 'node:fs';

export const RATE = 24000; // pcm16's rate on OpenAI's wire
export const CHUNK_MS = 40;
// Guards against hangs only: a step that has not happened by then has failed.
export const STEP_TIMEOUT_MS = 60000;

// Read from the installed package itself (not every package exports its package.json).
export function packageVersion(name) {
  const manifest = new URL(`./node_modules/${name}/package.json`, import.meta.url);
  return JSON.parse(readFileSync(manifest, 'utf8')).version;
}

export function args() {
  const [scenario, json] = process.argv.slice(2);
  return { scenario, ...JSON.parse(json) };
}

export function readPcm(path) {
  return readFileSync(path);
}

export function silence(ms) {
  return Buffer.alloc(2 * Math.floor((RATE * ms) / 1000));
}

export function pcmMs(bytes) {
  return (bytes / 2 / RATE) * 1000;
}

/** One scenario's outcome: the steps that worked, every error the client surfaced, notes. */
export class Report {
  constructor(client, version, scenario) {
    Object.assign(this, { client, version, scenario, steps: {}, errors: [], notes: [] });
  }

  mark(step, worked = true) {
    this.steps[step] = Boolean(worked);
  }

  error(message) {
    this.errors.push(String(message));
  }

  note(message) {
    this.notes.push(String(message));
  }

  print() {
    process.stdout.write(`${JSON.stringify(this)}\n`);
  }
}

/** Every server event a client delivered, in order; `wait` resolves with the first event
 * from index `from` on that matches, or null when none came within the step timeout. */
export class EventLog {
  constructor() {
    this.events = [];
    this.waiters = [];
  }

  get length() {
    return this.events.length;
  }

  add(event) {
    this.events.push(event);
    for (const waiter of [...this.waiters]) {
      if (waiter.predicate(event)) {
        this.waiters.splice(this.waiters.indexOf(waiter), 1);
        clearTimeout(waiter.timer);
        waiter.resolve(event);
      }
    }
  }

  find(predicate, from = 0) {
    return this.events.slice(from).find(predicate) ?? null;
  }

  wait(predicate, from = 0, timeoutMs = STEP_TIMEOUT_MS) {
    const found = this.find(predicate, from);
    if (found) return Promise.resolve(found);
    return new Promise((resolve) => {
      const waiter = { predicate, resolve };
      waiter.timer = setTimeout(() => {
        this.waiters.splice(this.waiters.indexOf(waiter), 1);
        resolve(null);
      }, timeoutMs);
      this.waiters.push(waiter);
    });
  }
}

export function ofType(type) {
  return (event) => event.type === type;
}

/** A live microphone: from start() to stop() it hands `send` one CHUNK_MS chunk of pcm16 every
 * CHUNK_MS in real time, silence unless it is saying something. */
export class Microphone {
  constructor(send) {
    this.send = send;
    this.step = 2 * Math.floor((RATE * CHUNK_MS) / 1000);
    this.pending = Buffer.alloc(0);
    this.drained = [];
    this.timer = null;
  }

  start() {
    if (this.timer) return;
    const t0 = performance.now();
    let k = 0;
    const tick = () => {
      let chunk;
      if (this.pending.length > 0) {
        chunk = this.pending.subarray(0, this.step);
        this.pending = this.pending.subarray(this.step);
        if (chunk.length < this.step) chunk = Buffer.concat([chunk, Buffer.alloc(this.step - chunk.length)]);
      } else {
        chunk = Buffer.alloc(this.step);
        for (const resolve of this.drained.splice(0)) resolve();
      }
      this.send(chunk);
      k += 1;
      this.timer = setTimeout(tick, Math.max(0, t0 + k * CHUNK_MS - performance.now()));
    };
    tick();
  }

  /** Speak `pcm` next; resolves once its last chunk has been sent. */
  say(pcm) {
    this.start();
    this.pending = Buffer.concat([this.pending, pcm]);
    return new Promise((resolve) => this.drained.push(resolve));
  }

  stop() {
    clearTimeout(this.timer);
    this.timer = null;
    for (const resolve of this.drained.splice(0)) resolve();
  }
}

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Run the scenario the command line names with `pkg`'s client and print its report; an
 * exception the library raised is the report's error, as a user would see it. */
export async function runScenario(pkg, scenarios) {
  const options = args();
  const report = new Report(pkg, packageVersion(pkg), options.scenario);
  try {
    await scenarios[options.scenario](options, report);
  } catch (err) {
    report.error(`${err.name}: ${err.message}`);
  }
  report.print();
  process.exit(0);
}
