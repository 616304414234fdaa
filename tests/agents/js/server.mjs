// A third-party A2A 1.0 agent built only on @a2a-js/sdk 1.3.0 and express (no murmur code),
// for the gateway tests to put behind a murmur door.
//
//     node server.mjs --port N [--name NAME]        (else the PORT environment variable)
//
// It serves JSON-RPC at "/" and its card at "/.well-known/agent-card.json" on 127.0.0.1.
// What a task does depends on the text of the message that starts it:
//   "stream: ..."  three WORKING updates "chunk 1..3", 0.4 s apart, then an artifact;
//   "slow: N"      works N seconds, cancelable all the while;
//   "input: ..."   INPUT_REQUIRED "say more"; the follow-up on the same task completes it;
//   "call: URL T"  POSTs a SendMessage with node's plain `http` module, through the proxy
//                  named by HTTP_PROXY (absolute-form request, Proxy-Authorization: Basic);
//   "fail: ..."    FAILED with a message;
//   anything else  completes with "<name> heard: <text>".
// On stderr: one line with the environment's variable names at start, then one line per
// HTTP request with its method, path and every header (the tests scan these for tokens).
//
// The code follows that order: the command line, the event builders, the outbound call,
// the behaviours, the executor that picks one, the card, the request log, and main.

import http from 'node:http';
import { randomUUID } from 'node:crypto';
import express from 'express';
import { AGENT_CARD_PATH, AgentCard, Message, Role, TaskState } from '@a2a-js/sdk';
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import { agentCardHandler, jsonRpcHandler, UserBuilder } from '@a2a-js/sdk/server/express';

const CHUNK_INTERVAL_MS = 400;
const CALL_TIMEOUT_MS = 60_000;

// ------------------------------------------------------------------- command line

function parseArgs(argv) {
  const args = { port: undefined, name: 'js-agent' };
  for (let i = 0; i < argv.length; i += 1) {
    if (argv[i] === '--port') args.port = argv[++i];
    else if (argv[i] === '--name') args.name = argv[++i];
    else usage(`unknown argument: ${argv[i]}`);
  }
  const port = args.port ?? process.env.PORT ?? '';
  if (!/^\d+$/.test(port)) usage('give --port N or set PORT');
  return { port: Number(port), name: args.name };
}

function usage(problem) {
  say(`usage: node server.mjs --port N [--name NAME]: ${problem}`);
  process.exit(2);
}

function say(line) {
  process.stderr.write(`${line}\n`);
}

// ------------------------------------------------------------------- event builders

function agentMessage(task, text) {
  return Message.fromJSON({
    messageId: randomUUID(), role: 'ROLE_AGENT', taskId: task.taskId,
    contextId: task.contextId, parts: [{ text }],
  });
}

function statusUpdate(task, state, text) {
  const status = { state, timestamp: new Date().toISOString() };
  if (text !== undefined) status.message = agentMessage(task, text);
  return AgentEvent.statusUpdate({
    taskId: task.taskId, contextId: task.contextId, status, metadata: {},
  });
}

function artifactUpdate(task, text) {
  return AgentEvent.artifactUpdate({
    taskId: task.taskId, contextId: task.contextId, append: false, lastChunk: true,
    artifact: {
      artifactId: randomUUID(), name: 'answer', description: '', extensions: [],
      parts: agentMessage(task, text).parts,
    },
  });
}

function textOf(message) {
  return (message?.parts ?? [])
    .filter((part) => part.content?.$case === 'text')
    .map((part) => part.content.value)
    .join('\n');
}

// A sleep that CancelTask cuts short: resolves true when it ran out, false when aborted.
function sleep(ms, signal) {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve(false);
    const timer = setTimeout(() => resolve(true), ms);
    signal.addEventListener('abort', () => { clearTimeout(timer); resolve(false); }, { once: true });
  });
}

// ------------------------------------------------------------------- outbound call

function sendMessageBody(text) {
  return JSON.stringify({
    jsonrpc: '2.0', id: 1, method: 'SendMessage',
    params: { message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text }] } },
  });
}

// Where to send the request: straight to the target, or (HTTP_PROXY set) to the proxy in
// absolute form, with the proxy's userinfo as Basic credentials.
function routeFor(target) {
  const proxyUrl = process.env.HTTP_PROXY || process.env.http_proxy;
  if (!proxyUrl) {
    return { host: bare(target.hostname), port: target.port || 80,
      path: target.pathname + target.search, headers: {} };
  }
  const proxy = new URL(proxyUrl);
  const headers = {};
  if (proxy.username || proxy.password) {
    const userinfo = `${decodeURIComponent(proxy.username)}:${decodeURIComponent(proxy.password)}`;
    headers['Proxy-Authorization'] = `Basic ${Buffer.from(userinfo).toString('base64')}`;
  }
  return { host: bare(proxy.hostname), port: proxy.port || 80, path: target.href, headers };
}

function bare(hostname) {
  return hostname.replace(/^\[(.*)\]$/, '$1');
}

function postSendMessage(url, text) {
  const target = new URL(url);
  if (target.protocol !== 'http:') return Promise.reject(new Error(`not an http URL: ${url}`));
  const route = routeFor(target);
  const body = Buffer.from(sendMessageBody(text));
  return new Promise((resolve, reject) => {
    const request = http.request({
      method: 'POST', host: route.host, port: route.port, path: route.path,
      headers: {
        ...route.headers, Host: target.host, 'Content-Type': 'application/json',
        Accept: 'application/json', 'A2A-Version': '1.0', 'Content-Length': body.length,
      },
    }, (response) => {
      const chunks = [];
      response.on('data', (chunk) => chunks.push(chunk));
      response.on('end', () => resolve({
        status: response.statusCode, body: Buffer.concat(chunks).toString('utf8'),
      }));
      response.on('error', reject);
    });
    request.setTimeout(CALL_TIMEOUT_MS, () => request.destroy(new Error('call timed out')));
    request.on('error', reject);
    request.end(body);
  });
}

function textsOf(parts) {
  return (parts ?? []).filter((part) => typeof part.text === 'string').map((part) => part.text);
}

// The text of a SendMessage result: its task's artifacts (else its status message), or its
// message's parts.
function answerText(result) {
  if (result.task) {
    const texts = (result.task.artifacts ?? []).flatMap((artifact) => textsOf(artifact.parts));
    return (texts.length ? texts : textsOf(result.task.status?.message?.parts)).join('\n');
  }
  return textsOf(result.message?.parts).join('\n');
}

// ------------------------------------------------------------------- behaviours

// Each behaviour publishes its updates on `bus` and ends the task in its final state (or
// CANCELED when `signal` aborts).
class Behaviours {
  constructor(name) {
    this.name = name;
  }

  answer(task, bus, text) {
    bus.publish(artifactUpdate(task, text));
    bus.publish(statusUpdate(task, TaskState.TASK_STATE_COMPLETED));
  }

  canceled(task, bus) {
    bus.publish(statusUpdate(task, TaskState.TASK_STATE_CANCELED, 'canceled'));
  }

  async default(task, bus, _signal, text) {
    this.answer(task, bus, `${this.name} heard: ${text}`);
  }

  async stream(task, bus, signal) {
    for (const number of [1, 2, 3]) {
      bus.publish(statusUpdate(task, TaskState.TASK_STATE_WORKING, `chunk ${number}`));
      if (!(await sleep(CHUNK_INTERVAL_MS, signal))) return this.canceled(task, bus);
    }
    this.answer(task, bus, `${this.name} streamed 3 chunks`);
  }

  async slow(task, bus, signal, rest) {
    const seconds = Number(rest);
    if (!Number.isFinite(seconds) || rest === '') return this.fail(task, bus, signal, `bad input: ${rest}`);
    bus.publish(statusUpdate(task, TaskState.TASK_STATE_WORKING, `working ${seconds} s`));
    if (!(await sleep(seconds * 1000, signal))) return this.canceled(task, bus);
    this.answer(task, bus, `${this.name} worked ${seconds} s`);
  }

  async askForInput(task, bus) {
    bus.publish(statusUpdate(task, TaskState.TASK_STATE_INPUT_REQUIRED, 'say more'));
  }

  async followUp(task, bus, _signal, text) {
    this.answer(task, bus, `${this.name} got: ${text}`);
  }

  async call(task, bus, signal, rest) {
    const [url, ...words] = rest.trim().split(' ');
    bus.publish(statusUpdate(task, TaskState.TASK_STATE_WORKING, `calling ${url}`));
    let reply;
    try {
      reply = await postSendMessage(url, words.join(' '));
    } catch (error) {
      return this.fail(task, bus, signal, `call failed: ${error.message}`, true);
    }
    if (signal.aborted) return this.canceled(task, bus);
    if (reply.status !== 200) {
      return this.answer(task, bus, `${this.name} call refused: ${reply.status} ${reply.body}`);
    }
    const parsed = JSON.parse(reply.body);
    if (parsed.error) return this.answer(task, bus, `${this.name} call error: ${reply.body}`);
    this.answer(task, bus, `${this.name} was told: ${answerText(parsed.result)}`);
  }

  async fail(task, bus, _signal, rest, named = false) {
    const text = named ? `${this.name} ${rest}` : `${this.name} failed: ${rest.trim()}`;
    bus.publish(statusUpdate(task, TaskState.TASK_STATE_FAILED, text));
  }

  pick(text) {
    const prefixes = [['stream:', this.stream], ['slow:', this.slow],
      ['input:', this.askForInput], ['call:', this.call], ['fail:', this.fail]];
    const stripped = text.trim();
    for (const [prefix, behaviour] of prefixes) {
      if (stripped.startsWith(prefix)) return [behaviour, stripped.slice(prefix.length).trim()];
    }
    return [this.default, text];
  }
}

// ------------------------------------------------------------------- executor

class ScriptedExecutor {
  constructor(name) {
    this.behaviours = new Behaviours(name);
    this.running = new Map(); // taskId -> AbortController of the execute() working on it
    this.parked = new Map(); // taskId -> contextId of a task waiting in INPUT_REQUIRED
  }

  execute = async (requestContext, bus) => {
    const { taskId, contextId } = requestContext;
    const userMessage = requestContext.userMessage;
    const existing = requestContext.task;
    // Every turn must start with a Task event, follow-ups included (the SDK checks).
    bus.publish(AgentEvent.task(existing ?? {
      id: taskId, contextId, artifacts: [], history: [userMessage], metadata: undefined,
      status: { state: TaskState.TASK_STATE_SUBMITTED, timestamp: new Date().toISOString() },
    }));
    const task = { taskId, contextId };
    const text = textOf(userMessage);
    const controller = new AbortController();
    this.running.set(taskId, controller);
    try {
      if (existing?.status?.state === TaskState.TASK_STATE_INPUT_REQUIRED) {
        this.parked.delete(taskId);
        await this.behaviours.followUp(task, bus, controller.signal, text);
        return;
      }
      const [behaviour, rest] = this.behaviours.pick(text);
      if (behaviour === this.behaviours.askForInput) this.parked.set(taskId, contextId);
      await behaviour.call(this.behaviours, task, bus, controller.signal, rest);
    } finally {
      this.running.delete(taskId);
    }
  };

  // The handler then waits on `bus` for the terminal event: a running execute() publishes
  // CANCELED when its sleep is aborted; a task parked in INPUT_REQUIRED has none, so we do.
  cancelTask = async (taskId, bus) => {
    const controller = this.running.get(taskId);
    if (controller) {
      controller.abort();
      return;
    }
    const contextId = this.parked.get(taskId) ?? '';
    this.parked.delete(taskId);
    this.behaviours.canceled({ taskId, contextId }, bus);
  };
}

// ------------------------------------------------------------------- card

function agentCard(name, port) {
  return AgentCard.fromJSON({
    name,
    description: 'A third-party @a2a-js/sdk test agent (stream, slow, input, call, fail).',
    version: '1.0.0',
    supportedInterfaces: [
      { url: `http://127.0.0.1:${port}/`, protocolBinding: 'JSONRPC', protocolVersion: '1.0' },
    ],
    provider: { organization: 'murmur-door tests', url: 'https://example.invalid/murmur-door' },
    capabilities: { streaming: true, pushNotifications: false },
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
    skills: [{
      id: 'scripted', name: 'Scripted replies',
      description: 'Answers by the prefix of the first message.',
      tags: ['test'], examples: ['hello', 'stream: go', 'slow: 2'],
    }],
  });
}

// ------------------------------------------------------------------- request log

function requestLog(name) {
  return (req, _res, next) => {
    const headers = [];
    for (let i = 0; i < req.rawHeaders.length; i += 2) {
      headers.push([req.rawHeaders[i].toLowerCase(), req.rawHeaders[i + 1]]);
    }
    say(`${name} request: ${JSON.stringify({ method: req.method, path: req.path, headers })}`);
    next();
  };
}

// ------------------------------------------------------------------- main

function main() {
  const { port, name } = parseArgs(process.argv.slice(2));
  say(`${name} environment: ${Object.keys(process.env).sort().join(' ')}`);
  const card = agentCard(name, port);
  const requestHandler = new DefaultRequestHandler(
    card, new InMemoryTaskStore(), new ScriptedExecutor(name));
  const app = express();
  app.use(requestLog(name));
  app.use(`/${AGENT_CARD_PATH}`, agentCardHandler({ agentCardProvider: requestHandler }));
  app.use(jsonRpcHandler({ requestHandler, userBuilder: UserBuilder.noAuthentication }));
  const server = app.listen(port, '127.0.0.1', (error) => {
    if (error) {
      say(`${name} cannot listen on 127.0.0.1:${port}: ${error.message}`);
      process.exit(1);
    }
    say(`${name} listening on http://127.0.0.1:${port}/`);
  });
  for (const signal of ['SIGTERM', 'SIGINT']) {
    process.on(signal, () => {
      server.closeAllConnections();
      server.close(() => process.exit(0));
      setTimeout(() => process.exit(0), 1000).unref();
    });
  }
}

main();
