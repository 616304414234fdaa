// An A2A 1.0 client built only on @a2a-js/sdk 1.3.0, over its HTTP+JSON (REST) transport,
// for the tests to run against a murmur door (tests/integration/test_rest_clients.py).
//
//     node rest_client.mjs DOOR_URL SCENARIO [BINDING]   (the bearer token: first line of stdin)
//
// BINDING: HTTP+JSON (the default) or JSONRPC, the SDK's transport the client speaks.
//
// The token is read from stdin only, never from argv or the environment, and is never
// printed. An empty first line means no token. Each step prints one JSON line on stdout:
// {"step": NAME, ...} with what it received, or {"step": NAME, "error": {...}} when the
// call threw (the error's class name, A2A reason, HTTP status and message).
//
// Scenarios:
//   full         the card (fetched with the token), then: send blocking, send with
//                returnImmediately then get, stream, list with paging (pageSize 2 over 3
//                tasks), subscribe to a live task, cancel and cancel again, input-required
//                then resume with the task id, and an unknown task id's error;
//   public-card  the card fetched without any credential (a door with public_card), then
//                a blocking send with the token.
//
// The door's agent (tests/support/rest_clients.py) holds a "hold:KEY" task until a
// "release:KEY" task runs, asks "which language?" on "ask", and otherwise sends a status,
// a two-chunk artifact and "echo: TEXT".

import { randomUUID } from 'node:crypto';
import { SendMessageRequest, StreamResponse, Task } from '@a2a-js/sdk';
import {
  ClientFactory,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
  RestTransportFactory,
  createAuthenticatingFetchWithRetry,
} from '@a2a-js/sdk/client';
import { TaskNotFoundError } from '@a2a-js/sdk/errors';

const POLL_INTERVAL_MS = 50;
const POLL_LIMIT = 100;

// ------------------------------------------------------------------- input and output

async function readToken() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return Buffer.concat(chunks).toString('utf8').split('\n', 1)[0].trim();
}

function emit(step, fields) {
  process.stdout.write(`${JSON.stringify({ step, ...fields })}\n`);
}

function describe(error) {
  return {
    name: error?.name,
    reason: error?.reason,
    statusCode: error?.statusCode,
    transport: error?.transport,
    message: String(error?.message ?? error),
    isTaskNotFoundError: error instanceof TaskNotFoundError,
  };
}

/** Run one step: print what it returns, or the error it throws. */
async function step(name, body) {
  try {
    const fields = await body();
    emit(name, fields);
    return fields;
  } catch (error) {
    emit(name, { error: describe(error) });
    return undefined;
  }
}

// ------------------------------------------------------------------- the client

function authenticatingFetch(token) {
  if (!token) return fetch;
  return createAuthenticatingFetchWithRetry(fetch, {
    headers: async () => ({ Authorization: `Bearer ${token}` }),
    shouldRetryWithHeaders: async () => undefined,
  });
}

let BINDING = 'HTTP+JSON';

/** A client that speaks BINDING only; the card is read with ``cardFetch``. */
function restClientFactory(token, cardFetch) {
  const Transport = BINDING === 'JSONRPC' ? JsonRpcTransportFactory : RestTransportFactory;
  return new ClientFactory({
    transports: [new Transport({ fetchImpl: authenticatingFetch(token) })],
    preferredTransports: [BINDING],
    cardResolver: new DefaultAgentCardResolver({ fetchImpl: cardFetch }),
  });
}

function request(text, { task, contextId, returnImmediately = false } = {}) {
  const message = { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text }] };
  if (task) {
    message.taskId = task.id;
    message.contextId = task.contextId;
  } else if (contextId) {
    message.contextId = contextId;
  }
  return SendMessageRequest.fromJSON({ message, configuration: { returnImmediately } });
}

/** The Task a (non-streaming) send answered, as JSON; a Message is an error here. */
async function sendForTask(client, sent) {
  const result = await client.sendMessage(sent);
  if ('messageId' in result) throw new Error('the door answered a Message, not a Task');
  return Task.toJSON(result);
}

async function collect(stream, onEvent) {
  const events = [];
  for await (const event of stream) {
    events.push(StreamResponse.toJSON(event));
    if (onEvent) await onEvent(events.length);
  }
  return events;
}

const TERMINAL = new Set(['TASK_STATE_COMPLETED', 'TASK_STATE_FAILED', 'TASK_STATE_CANCELED',
  'TASK_STATE_REJECTED']);

async function pollUntilEnded(client, id) {
  for (let polls = 1; polls <= POLL_LIMIT; polls += 1) {
    const task = Task.toJSON(await client.getTask({ id }));
    if (TERMINAL.has(task.status?.state)) return { task, polls };
    await new Promise((resolve) => { setTimeout(resolve, POLL_INTERVAL_MS); });
  }
  throw new Error(`task ${id} did not end after ${POLL_LIMIT} polls`);
}

// ------------------------------------------------------------------- scenarios

async function cardStep(factory, url) {
  let client;
  await step('card', async () => {
    client = await factory.createFromUrl(url);
    const card = await client.getAgentCard();
    return {
      protocol: client.transport.protocolName,
      name: card.name,
      interfaces: (card.supportedInterfaces ?? []).map((i) => i.protocolBinding),
    };
  });
  return client;
}

async function full(url, token) {
  const client = await cardStep(restClientFactory(token, authenticatingFetch(token)), url);
  if (!client) return 1;

  await step('send', async () => ({ task: await sendForTask(client, request('hello from js')) }));

  const immediately = await step('send_immediately', async () => ({
    task: await sendForTask(client, request('hold:js-get', { returnImmediately: true })),
  }));
  await step('get', async () => {
    await sendForTask(client, request('release:js-get'));
    return pollUntilEnded(client, immediately.task.id);
  });

  await step('stream', async () => ({
    events: await collect(client.sendMessageStream(request('stream me'))),
  }));

  await step('list', async () => {
    const contextId = randomUUID();
    const sent = [];
    for (let i = 0; i < 3; i += 1) {
      sent.push((await sendForTask(client, request(`task ${i}`, { contextId }))).id);
    }
    const pages = [];
    let pageToken = '';
    let totalSize;
    do {
      const page = await client.listTasks({ contextId, pageSize: 2, pageToken });
      pages.push(page.tasks.map((task) => task.id));
      pageToken = page.nextPageToken;
      totalSize = page.totalSize;
    } while (pageToken && pages.length < 3);
    return { sent, pages, totalSize };
  });

  await step('subscribe', async () => {
    const held = await sendForTask(client, request('hold:js-sub', { returnImmediately: true }));
    const events = await collect(client.resubscribeTask({ id: held.id }), async (count) => {
      if (count === 1) await sendForTask(client, request('release:js-sub'));
    });
    return { events };
  });

  const cancelled = await step('cancel', async () => {
    const held = await sendForTask(client, request('hold:js-cancel', { returnImmediately: true }));
    return { task: Task.toJSON(await client.cancelTask({ id: held.id })) };
  });
  await step('cancel_again', async () => ({
    task: Task.toJSON(await client.cancelTask({ id: cancelled.task.id })),
  }));

  const asked = await step('ask', async () => ({ task: await sendForTask(client, request('ask')) }));
  await step('resume', async () => ({
    task: await sendForTask(client, request('typescript', { task: asked.task })),
  }));

  await step('unknown', async () => ({
    task: Task.toJSON(await client.getTask({ id: 'no-such-task' })),
  }));
  return 0;
}

async function publicCard(url, token) {
  const client = await cardStep(restClientFactory(token, fetch), url);
  if (!client) return 1;
  await step('send', async () => ({ task: await sendForTask(client, request('hello from js')) }));
  return 0;
}

const SCENARIOS = { full, 'public-card': publicCard };

async function main() {
  const [url, scenario, binding = 'HTTP+JSON'] = process.argv.slice(2);
  BINDING = binding;
  if (!url || !(scenario in SCENARIOS) || !['HTTP+JSON', 'JSONRPC'].includes(binding)) {
    process.stderr.write(`usage: node rest_client.mjs DOOR_URL (${Object.keys(SCENARIOS)
      .join('|')}), the token on stdin\n`);
    return 2;
  }
  return SCENARIOS[scenario](url, await readToken());
}

const code = await main();
process.stdout.write('', () => process.exit(code));
