// An A2A 1.0 client built only on @a2a-js/sdk 1.3.0, over its gRPC transport
// (@a2a-js/sdk/client/grpc, with its peers @grpc/grpc-js and @bufbuild/protobuf), for the
// tests to run against a murmur door (tests/integration/test_js_grpc_client.py).
//
//     node grpc_client.mjs DOOR_URL SCENARIO      (the bearer token: first line of stdin)
//
// DOOR_URL is the door's HTTP URL: the SDK's ClientFactory reads the agent card there (with
// the token, unless the scenario says otherwise) and, with only the gRPC transport and
// preferredTransports ['GRPC'], picks the card's GRPC interface ("127.0.0.1:PORT") from its
// supportedInterfaces; every call after the card goes over gRPC, the token in the call's
// metadata ("authorization: Bearer ...") put there by a call interceptor of the client.
//
// The token is read from stdin only, never from argv or the environment, and is never
// printed. An empty first line means no token. Each step prints one JSON line on stdout:
// {"step": NAME, ...} with what it received, or {"step": NAME, "error": {...}} when the
// call threw (the error's class name, A2A reason, gRPC status code and message).
//
// Scenarios:
//   full             the card (fetched with the token), then: send blocking, get that task
//                    (historyLength 1), list with paging (pageSize 2 over 3 tasks), a
//                    streaming send, subscribe to a live task, cancel a held task and cancel
//                    it again, input-required then resume with the task id, and an unknown
//                    task id's error;
//   unauthenticated  the card fetched without any credential (a door with public_card),
//                    then send, get, list and a streaming send with the stdin token as it
//                    is (none, or a wrong one): each one's error.
//
// The door's agent (tests/support/rest_clients.py) holds a "hold:KEY" task until a
// "release:KEY" task runs, asks "which language?" on "ask", and otherwise sends a status,
// a two-chunk artifact and "echo: TEXT".

import { randomUUID } from 'node:crypto';
import {
  CancelTaskRequest,
  GetTaskRequest,
  ListTasksRequest,
  SendMessageRequest,
  StreamResponse,
  SubscribeToTaskRequest,
  Task,
} from '@a2a-js/sdk';
import {
  ClientFactory,
  DefaultAgentCardResolver,
  createAuthenticatingFetchWithRetry,
} from '@a2a-js/sdk/client';
import { GrpcTransportFactory } from '@a2a-js/sdk/client/grpc';
import { TaskNotCancelableError, TaskNotFoundError } from '@a2a-js/sdk/errors';

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
    status: error?.status,
    transport: error?.transport,
    message: String(error?.message ?? error),
    isTaskNotFoundError: error instanceof TaskNotFoundError,
    isTaskNotCancelableError: error instanceof TaskNotCancelableError,
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

/** A call interceptor that puts the token in each call's gRPC metadata. */
function bearerInterceptor(token) {
  return {
    async before(args) {
      if (!token) return;
      args.options = args.options ?? {};
      args.options.serviceParameters = {
        ...args.options.serviceParameters,
        authorization: `Bearer ${token}`,
      };
    },
    async after() {},
  };
}

/** A client that speaks gRPC only; the card is read over HTTP with ``cardFetch``. */
function grpcClientFactory(token, cardFetch) {
  return new ClientFactory({
    transports: [new GrpcTransportFactory()],
    preferredTransports: ['GRPC'],
    cardResolver: new DefaultAgentCardResolver({ fetchImpl: cardFetch }),
    clientConfig: { interceptors: [bearerInterceptor(token)] },
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

// ------------------------------------------------------------------- scenarios

async function cardStep(factory, url) {
  let client;
  await step('card', async () => {
    client = await factory.createFromUrl(url);
    const card = await client.getAgentCard();
    const grpc = (card.supportedInterfaces ?? []).find((i) => i.protocolBinding === 'GRPC');
    return {
      protocol: client.transport.protocolName,
      version: client.protocolVersion,
      name: card.name,
      interfaces: (card.supportedInterfaces ?? []).map((i) => i.protocolBinding),
      grpcUrl: grpc?.url,
    };
  });
  return client;
}

async function full(url, token) {
  const client = await cardStep(grpcClientFactory(token, authenticatingFetch(token)), url);
  if (!client) return 1;

  const sent = await step('send', async () => ({
    task: await sendForTask(client, request('hello from js')),
  }));
  await step('get', async () => ({
    task: Task.toJSON(await client.getTask(
      GetTaskRequest.fromJSON({ id: sent.task.id, historyLength: 1 }))),
  }));

  await step('list', async () => {
    const contextId = randomUUID();
    const ids = [];
    for (let i = 0; i < 3; i += 1) {
      ids.push((await sendForTask(client, request(`task ${i}`, { contextId }))).id);
    }
    const pages = [];
    let pageToken = '';
    let totalSize;
    let pageSize;
    do {
      const page = await client.listTasks(
        ListTasksRequest.fromJSON({ contextId, pageSize: 2, pageToken }));
      pages.push(page.tasks.map((task) => task.id));
      pageToken = page.nextPageToken;
      totalSize = page.totalSize;
      pageSize = page.pageSize;
    } while (pageToken && pages.length < 3);
    return { sent: ids, pages, totalSize, pageSize };
  });

  await step('stream', async () => ({
    events: await collect(client.sendMessageStream(request('stream me'))),
  }));

  await step('subscribe', async () => {
    const held = await sendForTask(client, request('hold:js-sub', { returnImmediately: true }));
    const stream = client.resubscribeTask(SubscribeToTaskRequest.fromJSON({ id: held.id }));
    const events = await collect(stream, async (count) => {
      if (count === 1) await sendForTask(client, request('release:js-sub'));
    });
    return { events };
  });

  const cancelled = await step('cancel', async () => {
    const held = await sendForTask(client, request('hold:js-cancel', { returnImmediately: true }));
    const task = await client.cancelTask(CancelTaskRequest.fromJSON({ id: held.id }));
    return { held, task: Task.toJSON(task) };
  });
  await step('cancel_again', async () => ({
    task: Task.toJSON(await client.cancelTask(
      CancelTaskRequest.fromJSON({ id: cancelled.task.id }))),
  }));

  const asked = await step('ask', async () => ({
    task: await sendForTask(client, request('ask')),
  }));
  await step('resume', async () => ({
    task: await sendForTask(client, request('typescript', { task: asked.task })),
  }));

  await step('unknown', async () => ({
    task: Task.toJSON(await client.getTask(GetTaskRequest.fromJSON({ id: 'no-such-task' }))),
  }));
  return 0;
}

async function unauthenticated(url, token) {
  const client = await cardStep(grpcClientFactory(token, fetch), url);
  if (!client) return 1;
  await step('send', async () => ({ task: await sendForTask(client, request('no entry')) }));
  await step('get', async () => ({
    task: Task.toJSON(await client.getTask(GetTaskRequest.fromJSON({ id: 'no-such-task' }))),
  }));
  await step('list', async () => {
    const page = await client.listTasks(ListTasksRequest.fromJSON({ pageSize: 2 }));
    return { pages: [page.tasks.map((task) => task.id)] };
  });
  await step('stream', async () => ({
    events: await collect(client.sendMessageStream(request('no entry either'))),
  }));
  return 0;
}

const SCENARIOS = { full, unauthenticated };

async function main() {
  const [url, scenario] = process.argv.slice(2);
  if (!url || !(scenario in SCENARIOS)) {
    process.stderr.write(`usage: node grpc_client.mjs DOOR_URL (${Object.keys(SCENARIOS)
      .join('|')}), the token on stdin\n`);
    return 2;
  }
  return SCENARIOS[scenario](url, await readToken());
}

const code = await main();
process.stdout.write('', () => process.exit(code));
