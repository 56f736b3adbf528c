import { derivedSeed, seededRandom } from "../../core/random.ts";
import { randomUUID } from "node:crypto";
import { z } from "zod";
import { ApiError, badRequest } from "../../core/errors.ts";
import type { ModelLoader } from "../../core/model-loader.ts";
import type { ModelRegistry } from "../../core/registry.ts";
import type { EndpointStore, JsonObject } from "../../store/store.ts";
import { boundedRecord } from "../json-object.ts";
import { listOf } from "../list-of.ts";

/**
 * Serving endpoints: what `/serving-endpoints/{name}` resolves to. Two kinds, as in Databricks:
 * every model the server was started with is a ready pay-per-token endpoint of the same name, and
 * endpoints created through `/api/2.0/serving-endpoints` are provisioned-throughput endpoints that
 * serve one or several entities (A/B traffic by route percentages), kept in the store.
 */

export type EndpointKind = "pay-per-token" | "provisioned-throughput";

// "." and ".." are left out: clients and proxies fold them out of /served-models/{entity}/ paths.
const entityName = z
  .string()
  .regex(/^(?!\.\.?$)[A-Za-z0-9_.-]{1,63}$/, "served entity names are 1 to 63 letters, digits, '.', '_' or '-', and not '.' or '..'");

export const servedEntity = z.strictObject({
  name: entityName.optional(),
  entity_name: z.string().min(1),
  // An empty version named the entity `<model>-`, a trailing dash standing for nothing.
  entity_version: z.union([z.string().min(1, "entity_version is a non-empty string (or null)"), z.int()]).nullish(),
  workload_size: z.enum(["Small", "Medium", "Large"]).nullish(),
  workload_type: z.string().nullish(),
  scale_to_zero_enabled: z.boolean().nullish(),
  min_provisioned_throughput: z.int().min(0).nullish(),
  max_provisioned_throughput: z.int().min(0).nullish(),
  environment_vars: boundedRecord(z.string(), z.string(), 1024, "environment_vars holds at most 1024 variables").nullish(),
});

export const endpointConfig = z.strictObject({
  served_entities: listOf(servedEntity, { min: 1, minMessage: "served_entities needs at least one entity", max: 15 }),
  traffic_config: z
    .strictObject({
      routes: listOf(z.strictObject({ served_model_name: z.string().min(1), traffic_percentage: z.int().min(0).max(100) }), { min: 1 }),
    })
    .nullish(),
});
export type EndpointConfigInput = z.infer<typeof endpointConfig>;

export const createEndpointRequest = z.strictObject({
  name: z.string().regex(/^[A-Za-z0-9_-]{1,63}$/, "endpoint names are 1 to 63 letters, digits, '_' or '-'"),
  config: endpointConfig,
  // Bounded (tags are shown and stored whole; 200,000 of them held the server for a second), keys unique.
  tags: listOf(z.strictObject({ key: z.string().min(1).max(255), value: z.string().max(255).optional() }), { max: 50 })
    .refine((tags) => new Set(tags.map((t) => t.key)).size === tags.length, "tag keys must be unique")
    .nullish(),
  route_optimized: z.literal(false).nullish(),
});

/** An endpoint config after defaults: every entity named, routes that add up to 100. */
export interface EndpointConfig {
  served_entities: Array<z.infer<typeof servedEntity> & { name: string }>;
  traffic_config: { routes: Array<{ served_model_name: string; traffic_percentage: number }> };
}

/**
 * The name Databricks gives an entity that has none: its model's name (a path's file name without
 * `.gguf`), then `-` and the version, cleaned to the characters a name may hold and cut to 63, so it
 * passes the same rule as a name given explicitly (a GET's config can be PUT back as it is).
 */
function defaultEntityName(entityName: string, version: string | number | null | undefined): string {
  const base = (entityName.split(/[\\/]/).pop() ?? entityName).replace(/\.gguf$/i, "");
  const suffix = version != null ? `-${version}` : "";
  const clean = (text: string) => text.replace(/[^A-Za-z0-9_.-]/g, "_");
  const tail = clean(suffix).slice(0, 20);
  const name = clean(base).slice(0, 63 - tail.length) + tail;
  return name === "" || name === "." || name === ".." ? "entity" : name;
}

/**
 * Checks a config and fills in Databricks' defaults (entity names, a single entity's whole route).
 * `at` is where the config sits in the request body ("config." on create, "" on a PUT of the config).
 */
export function normaliseConfig(input: EndpointConfigInput, at = "config."): EndpointConfig {
  const entities = input.served_entities.map((e, i) => {
    const name = e.name ?? defaultEntityName(e.entity_name, e.entity_version);
    if (e.min_provisioned_throughput != null && e.max_provisioned_throughput != null && e.min_provisioned_throughput > e.max_provisioned_throughput)
      throw badRequest("min_provisioned_throughput may not exceed max_provisioned_throughput.", `${at}served_entities[${i}].min_provisioned_throughput`);
    if (e.environment_vars && Object.keys(e.environment_vars).length > 0)
      throw badRequest("environment_vars cannot be set: local models read no environment.", `${at}served_entities[${i}].environment_vars`);
    if (e.workload_type != null && e.workload_type !== "CPU" && e.workload_type !== "GPU_SMALL")
      throw badRequest(`workload_type '${e.workload_type}' is not offered; this server runs every entity on its own machine.`, `${at}served_entities[${i}].workload_type`);
    return { ...e, name };
  });
  const names = new Set<string>();
  entities.forEach((e, i) => {
    if (names.has(e.name)) throw badRequest(`Two served entities are named '${e.name}'.`, `${at}served_entities[${i}].name`);
    names.add(e.name);
  });
  let routes = input.traffic_config?.routes;
  if (!routes) {
    if (entities.length > 1) throw badRequest("An endpoint with several served entities needs traffic_config.routes.", `${at}traffic_config`);
    routes = [{ served_model_name: entities[0].name, traffic_percentage: 100 }];
  }
  const routed = new Set<string>();
  routes.forEach((r, i) => {
    if (!names.has(r.served_model_name))
      throw badRequest(`traffic_config.routes[${i}] names '${r.served_model_name}', which is not a served entity of this config.`, `${at}traffic_config.routes[${i}].served_model_name`);
    if (routed.has(r.served_model_name)) throw badRequest(`'${r.served_model_name}' has two routes.`, `${at}traffic_config.routes[${i}]`);
    routed.add(r.served_model_name);
  });
  const total = routes.reduce((a, r) => a + r.traffic_percentage, 0);
  if (total !== 100) throw badRequest(`The traffic percentages add up to ${total}; they must add up to 100.`, `${at}traffic_config.routes`);
  return { served_entities: entities, traffic_config: { routes } };
}

/** A config whose entities are loaded: entity name → model id, and where each route's share ends. */
interface LiveConfig {
  config: EndpointConfig;
  version: number;
  models: Map<string, string>;
  /** Cumulative percentages: an entity serves draws below its bound. */
  bounds: Array<{ entity: string; upTo: number }>;
  task: "llm/v1/chat" | "llm/v1/embeddings";
}

export interface Endpoint {
  name: string;
  kind: EndpointKind;
  id: string;
  creator: string;
  createdAt: number;
  updatedAt: number;
  live?: LiveConfig;
  pending?: { config: EndpointConfig; version: number };
  /** A stored serving config that did not load after a restart: kept in the store until one does. */
  unloaded?: { config: EndpointConfig; version: number };
  configUpdate: "NOT_UPDATING" | "IN_PROGRESS" | "UPDATE_FAILED";
  failure?: string;
  lastUsed: number;
  tags: Array<{ key: string; value?: string }>;
  /**
   * Where an entity that names a model loaded at run time (by id) came from: that model is not
   * served again after a restart unless the endpoint loads it, from here.
   */
  sources: Record<string, string>;
}

/** A request's target: the endpoint, the entity the traffic split picked, and its model. */
export interface Routed {
  endpoint: Endpoint;
  /** The served entity's name (pay-per-token: the endpoint's own). */
  entity: string;
  model: string;
  /**
   * Every model the request could have been routed to (the endpoint's entities when the split drew
   * one; the named entity's alone otherwise). Whether a request is valid must not depend on the draw.
   */
  candidates?: string[];
}


export interface EndpointOptions {
  /** Seed of the traffic split; none: Math.random. */
  routeSeed?: number;
  /** Idle time after which a scale-to-zero entity's model is unloaded (ms). */
  scaleToZeroAfterMs: number;
}

/**
 * A caller's model list, as routing sees it: whether it may use a model, and `authorize`, which
 * throws the refusal (a 403) when it may not use the model routed to.
 */
export interface ModelAccess {
  mayUse(model: string): boolean;
  authorize(model: string): void;
}

const OPEN_ACCESS: ModelAccess = { mayUse: () => true, authorize: () => {} };

/** The answer to a caller that may use no model of an endpoint (see EndpointManager.mayQuery). */
export const endpointRefused = (name: string) =>
  new ApiError(403, `This API key may not query the endpoint '${name}'.`, { code: "model_not_allowed" });

/** A map of entity sources keyed by names a caller chose: no prototype to read a key like "constructor" from. */
const noSources = (): Record<string, string> => Object.create(null) as Record<string, string>;

const notFound = (name: string) => new ApiError(404, `The serving endpoint '${name}' does not exist.`, { code: "RESOURCE_DOES_NOT_EXIST" });

export class EndpointManager {
  private readonly provisioned = new Map<string, Endpoint>();
  private readonly payPerToken = new Set<string>();
  /**
   * Each endpoint's own stream of draws under --route-seed (made at its first draw): one endpoint's
   * sequence depends on its own requests only, not on the traffic other endpoints get.
   */
  private readonly streams = new Map<string, () => number>();
  private readonly started = Date.now();
  private sweeper: NodeJS.Timeout | undefined;
  /** Loads under way, so tests and shutdown can wait for them. */
  private readonly jobs = new Set<Promise<void>>();
  /**
   * The model id each entity source (a path, an hf: reference) was loaded as: another endpoint's
   * pending config names a source, and the model it shares must not be unloaded under it.
   */
  private readonly loadedAs = new Map<string, string>();

  constructor(
    private readonly registry: ModelRegistry,
    private readonly store: EndpointStore,
    private readonly loader: ModelLoader | undefined,
    private readonly opts: EndpointOptions,
  ) {
    for (const m of registry.list()) this.payPerToken.add(m.id);
  }

  /** Whether a provisioned endpoint has this name (a model loaded under it could not be its own endpoint). */
  isProvisioned(name: string): boolean {
    return this.provisioned.has(name);
  }

  /** A model loaded through the admin route becomes a pay-per-token endpoint too. */
  addPayPerToken(model: string): void {
    this.payPerToken.add(model);
  }

  removePayPerToken(model: string): void {
    this.payPerToken.delete(model);
  }

  /** Brings back the stored endpoints and starts loading their entities. */
  async restore(): Promise<void> {
    for (const r of await this.store.list()) {
      const b = r.body as {
        id: string;
        creator: string;
        config?: EndpointConfig;
        config_version?: number;
        pending_config?: EndpointConfig;
        failure?: string;
        tags?: Endpoint["tags"];
        entity_sources?: Record<string, string>;
      };
      const ep: Endpoint = {
        name: r.name,
        kind: "provisioned-throughput",
        id: b.id,
        creator: b.creator,
        createdAt: r.createdAt,
        updatedAt: r.updatedAt,
        configUpdate: "NOT_UPDATING",
        lastUsed: Date.now(),
        tags: b.tags ?? [],
        sources: Object.assign(noSources(), b.entity_sources),
      };
      this.provisioned.set(r.name, ep);
      // A failed update is still failed after a restart: the config that serves is loaded again,
      // and the endpoint keeps saying UPDATE_FAILED and why until the next update.
      ep.failure = b.failure;
      // The version of the config that served (stored with it). An endpoint stored before any
      // config of it served (created just before the server stopped) has none: its first config
      // is version 1, as it would have been had the server kept running.
      const version = b.config ? (b.config_version ?? 1) : 0;
      // An update the server stopped in the middle of goes on after the serving config is back,
      // as it did before: if the update then fails, the old config still serves.
      const next = b.pending_config ? { config: b.pending_config, version: version + 1 } : undefined;
      if (b.config) this.startLoad(ep, b.config, version, { stillFailed: b.failure !== undefined, restoring: true, next });
      else if (next) this.startLoad(ep, next.config, next.version);
      else ep.configUpdate = "UPDATE_FAILED";
    }
  }

  startScaleToZero(): void {
    const every = Math.max(50, Math.min(5_000, this.opts.scaleToZeroAfterMs / 4));
    this.sweeper = setInterval(() => void this.scaleToZero(), every);
    this.sweeper.unref();
  }

  async close(): Promise<void> {
    if (this.sweeper) clearInterval(this.sweeper);
    await Promise.allSettled([...this.jobs]);
  }

  /** Waits for every load under way (tests). */
  async settled(): Promise<void> {
    while (this.jobs.size > 0) await Promise.allSettled([...this.jobs]);
  }

  /** The models behind an endpoint: those serving it, and those of a config being loaded or kept. */
  modelsOf(ep: Endpoint): string[] {
    if (ep.kind === "pay-per-token") return [ep.name];
    const names = new Set(ep.live?.models.values() ?? []);
    for (const c of [ep.pending?.config, ep.unloaded?.config]) for (const e of c?.served_entities ?? []) names.add(e.entity_name);
    return [...names];
  }

  /**
   * The provisioned endpoints that serve the model `id`, are loading a config that names it, or keep
   * one to wake with (scaled to zero): unloading it under any of them breaks that endpoint.
   */
  usersOf(id: string): Endpoint[] {
    return [...this.provisioned.values()].filter((ep) => this.modelsOf(ep).some((n) => n === id || this.loadedAs.get(n) === id));
  }

  /**
   * Whether a caller may query the endpoint `name` at all: one of its models (served, loading or
   * scaled to zero) is one it may use. A name no endpoint has goes by itself, as the OpenAI routes
   * treat a model served nowhere: a caller limited to some models is refused it as it is refused
   * the served ones, and cannot tell the endpoints and models here from names that do not exist.
   */
  mayQuery(name: string, mayUse: (model: string) => boolean): boolean {
    const ep = this.provisioned.get(name) ?? (this.payPerToken.has(name) && this.registry.has(name) ? this.payPerTokenEndpoint(name) : undefined);
    const models = ep ? this.modelsOf(ep) : [];
    return (models.length > 0 ? models : [name]).some(mayUse);
  }

  list(): Endpoint[] {
    return [...this.payPerTokenEndpoints(), ...this.provisioned.values()];
  }

  get(name: string): Endpoint {
    const pt = this.provisioned.get(name);
    if (pt) return pt;
    if (this.payPerToken.has(name) && this.registry.has(name)) return this.payPerTokenEndpoint(name);
    throw notFound(name);
  }

  private payPerTokenEndpoints(): Endpoint[] {
    return [...this.payPerToken].filter((m) => this.registry.has(m) && !this.provisioned.has(m)).map((m) => this.payPerTokenEndpoint(m));
  }

  private payPerTokenEndpoint(model: string): Endpoint {
    const config: EndpointConfig = {
      served_entities: [{ name: model, entity_name: model }],
      traffic_config: { routes: [{ served_model_name: model, traffic_percentage: 100 }] },
    };
    const m = this.registry.get(model);
    return {
      name: model,
      kind: "pay-per-token",
      id: `ppt-${model}`,
      creator: "plinth",
      createdAt: this.started,
      updatedAt: this.started,
      live: m && m.status !== "failed" && m.status !== "loading" ? this.liveConfig(config, 1, new Map([[model, model]])) : undefined,
      configUpdate: m?.status === "failed" ? "UPDATE_FAILED" : m?.status === "loading" ? "IN_PROGRESS" : "NOT_UPDATING",
      failure: m?.error,
      lastUsed: Date.now(),
      tags: [],
      sources: noSources(),
    };
  }

  async create(body: z.infer<typeof createEndpointRequest>): Promise<Endpoint> {
    const config = normaliseConfig(body.config, "config.");
    if (this.provisioned.has(body.name) || (this.payPerToken.has(body.name) && this.registry.has(body.name)))
      throw new ApiError(409, `A serving endpoint named '${body.name}' already exists.`, { code: "RESOURCE_ALREADY_EXISTS" });
    const now = Date.now();
    const ep: Endpoint = {
      name: body.name,
      kind: "provisioned-throughput",
      id: randomUUID().replaceAll("-", ""),
      creator: "plinth",
      createdAt: now,
      updatedAt: now,
      configUpdate: "IN_PROGRESS",
      lastUsed: now,
      tags: body.tags ?? [],
      sources: noSources(),
    };
    await this.checkEntitiesExist(config, "config.");
    this.noteSources(ep, config);
    if (!(await this.store.create({ name: ep.name, createdAt: now, updatedAt: now, body: this.record(ep, config) })))
      throw new ApiError(409, `A serving endpoint named '${body.name}' already exists.`, { code: "RESOURCE_ALREADY_EXISTS" });
    this.provisioned.set(ep.name, ep);
    this.startLoad(ep, config, 1);
    return ep;
  }

  /** PUT /{name}/config: the current config keeps serving until the new one is loaded. */
  async updateConfig(name: string, input: EndpointConfigInput): Promise<Endpoint> {
    const ep = this.provisioned.get(name);
    if (!ep) {
      if (this.payPerToken.has(name) && this.registry.has(name))
        throw badRequest(`'${name}' is a pay-per-token endpoint (a model the server was started with); its config cannot be changed.`, "name");
      throw notFound(name);
    }
    if (ep.configUpdate === "IN_PROGRESS")
      throw new ApiError(409, `The endpoint '${name}' is already being updated; wait until config_update is NOT_UPDATING.`, { code: "RESOURCE_CONFLICT" });
    const config = normaliseConfig(input, "");
    await this.checkEntitiesExist(config, "");
    // Looking at the files took a moment: another update may have begun meanwhile.
    if ((ep.configUpdate as Endpoint["configUpdate"]) === "IN_PROGRESS" || this.provisioned.get(name) !== ep)
      throw new ApiError(409, `The endpoint '${name}' is already being updated; wait until config_update is NOT_UPDATING.`, { code: "RESOURCE_CONFLICT" });
    ep.updatedAt = Date.now();
    ep.configUpdate = "IN_PROGRESS";
    ep.failure = undefined;
    this.noteSources(ep, config);
    await this.store.update(name, this.record(ep, config), ep.updatedAt);
    this.startLoad(ep, config, (ep.live?.version ?? ep.unloaded?.version ?? ep.pending?.version ?? 0) + 1);
    return ep;
  }

  async delete(name: string): Promise<void> {
    const ep = this.provisioned.get(name);
    if (!ep) {
      if (this.payPerToken.has(name) && this.registry.has(name))
        throw badRequest(`'${name}' is a pay-per-token endpoint (a model the server was started with); it cannot be deleted.`, "name");
      throw notFound(name);
    }
    this.provisioned.delete(name);
    // An endpoint created again under this name starts its draws afresh, as after a restart.
    this.streams.delete(name);
    ep.pending = undefined;
    await this.store.delete(name);
    // The endpoint is gone now; a model it loaded for itself is unloaded once its running requests
    // finish, which may take minutes: the DELETE does not wait for that.
    if (ep.live) {
      const job = this.releaseUnused([...ep.live.models.values()]).catch(() => {});
      this.jobs.add(job);
      void job.finally(() => this.jobs.delete(job));
    }
  }

  /**
   * Unloads models an endpoint loaded for itself (from a file or a hub reference) once no endpoint
   * uses them any more. Models the server was started with, or loaded through the admin route, stay.
   */
  private async releaseUnused(models: string[]): Promise<void> {
    if (!this.loader) return;
    const used = new Set<string>();
    for (const ep of this.provisioned.values()) {
      for (const m of ep.live?.models.values() ?? []) used.add(m);
      for (const e of ep.pending?.config.served_entities ?? []) used.add(this.loadedAs.get(e.entity_name) ?? e.entity_name);
    }
    // All of them at once, decided now: each unload takes the model off the registry at its start and
    // then waits for its running requests, and a set of users decided before one such wait could be
    // stale after it (a new endpoint may have taken the next model meanwhile).
    const unused = [...new Set(models)].filter((m) => !used.has(m) && !this.payPerToken.has(m) && this.registry.has(m));
    await Promise.all(unused.map((m) => this.loader!.unload(m).catch(() => {})));
  }

  /**
   * Where a data-plane request goes: the entity the route percentages pick, or the one named by
   * `/served-models/{entity}/invocations` (which bypasses the split, as Databricks' does, so one
   * entity of an A/B pair can be queried alone). A pay-per-token endpoint has one entity, named
   * like the endpoint. A scaled-to-zero model is loaded again first (the request waits).
   *
   * `access` is the caller's model list: the split draws among the entities it may use, and the
   * chosen entity's model is authorized before anything is done for it (a model scaled to zero is
   * not loaded back for a caller that may not use it).
   */
  async route(name: string, entity?: string, access: ModelAccess = OPEN_ACCESS): Promise<Routed> {
    if (!this.mayQuery(name, access.mayUse)) throw endpointRefused(name);
    const ep = this.get(name);
    const live = ep.live;
    if (!live) {
      if (ep.configUpdate === "UPDATE_FAILED")
        throw new ApiError(503, `The endpoint '${name}' is not ready: ${ep.failure ?? "its entities failed to load"}.`, { code: "TEMPORARILY_UNAVAILABLE" });
      throw new ApiError(503, `The endpoint '${name}' is not ready yet; its entities are loading.`, {
        code: "TEMPORARILY_UNAVAILABLE",
        headers: { "retry-after": "2" },
      });
    }
    const chosen = entity === undefined ? this.draw(ep.name, live, access.mayUse) : this.entityOf(ep, live, entity);
    const model = live.models.get(chosen)!;
    access.authorize(model);
    ep.lastUsed = Date.now();
    const m = this.registry.get(model);
    // Every request that finds the model away waits for it, not only the one that wakes it: those
    // arriving while it loads back join that load (the loader hands them the load under way).
    if ((m?.status === "unloaded" || m?.status === "loading") && this.loader) {
      await this.loader.load(model);
      // The idle time counts from when the model is back, not from when the request arrived.
      ep.lastUsed = Date.now();
    }
    const candidates = entity === undefined ? this.reachable(live, access.mayUse) : [model];
    return { endpoint: ep, entity: ep.kind === "pay-per-token" ? ep.name : chosen, model, candidates };
  }

  /**
   * The entity the traffic split picks for one request, among those whose model the caller may use
   * (their shares scaled up to fill the split): a key limited to one model of an A/B pair is always
   * answered by it, not refused on every other draw. When it may use none, the split as it stands
   * (the model check then refuses). Only a real choice draws a number: a single entity (every
   * pay-per-token endpoint) or a single usable one takes nothing from the endpoint's stream.
   */
  private draw(name: string, live: LiveConfig, mayUse: (model: string) => boolean): string {
    let lower = 0;
    const shares = live.bounds.map((b) => {
      const share = { entity: b.entity, weight: b.upTo - lower };
      lower = b.upTo;
      return share;
    });
    const usable = shares.filter((s) => s.weight > 0 && mayUse(live.models.get(s.entity)!));
    const pool = (usable.length > 0 ? usable : shares).filter((s) => s.weight > 0);
    if (pool.length === 1) return pool[0].entity;
    const total = pool.reduce((sum, s) => sum + s.weight, 0);
    let draw = this.random(name)() * total;
    for (const s of pool) {
      if (draw < s.weight) return s.entity;
      draw -= s.weight;
    }
    return pool[pool.length - 1].entity;
  }

  /**
   * The models the split can answer this caller with (entities with a share, among those it may
   * use, as \`draw\` picks them): whether a request is valid may not depend on the draw, and an
   * entity no request is ever routed to has no say in it.
   */
  private reachable(live: LiveConfig, mayUse: (model: string) => boolean): string[] {
    const routed = live.bounds.map((b) => live.models.get(b.entity)!);
    const usable = routed.filter(mayUse);
    return [...new Set(usable.length > 0 ? usable : routed)];
  }

  /** The draws of endpoint \`name\`: Math.random, or under --route-seed its own seeded stream. */
  private random(name: string): () => number {
    const seed = this.opts.routeSeed;
    if (seed === undefined) return Math.random;
    let stream = this.streams.get(name);
    if (!stream) this.streams.set(name, (stream = seededRandom(derivedSeed(seed, name))));
    return stream;
  }

  /** A served entity asked for by name: it must be in the serving config (routed share or not). */
  private entityOf(ep: Endpoint, live: LiveConfig, entity: string): string {
    if (live.models.has(entity)) return entity;
    if (ep.pending?.config.served_entities.some((e) => e.name === entity))
      throw new ApiError(503, `The served entity '${entity}' of '${ep.name}' is still loading (it is in the pending config).`, {
        code: "TEMPORARILY_UNAVAILABLE",
        headers: { "retry-after": "2" },
      });
    const known = [...live.models.keys()].map((n) => `'${n}'`).join(", ");
    throw new ApiError(404, `The serving endpoint '${ep.name}' has no served entity named '${entity}'; it serves ${known}.`, {
      code: "RESOURCE_DOES_NOT_EXIST",
    });
  }

  /** The endpoint's task, from its served model: chat (generative) or embeddings (embedding-only). */
  taskOf(model: string): "llm/v1/chat" | "llm/v1/embeddings" {
    const engine = this.registry.get(model)?.engine;
    return engine && engine.embeddings?.info.embeddingOnly ? "llm/v1/embeddings" : "llm/v1/chat";
  }

  /**
   * An entity names a model this server serves or, where models can be loaded at run time, a
   * `.gguf` file or an `hf:` reference. Anything else is refused now rather than tried: a load of an
   * arbitrary path would tell the caller whether that file exists and what its first bytes are. So
   * is a file that can never load (missing, not a regular file, a malformed model): the loader looks
   * at its header here, before the load goes to the background.
   */
  private async checkEntitiesExist(config: EndpointConfig, at: string): Promise<void> {
    for (const [i, e] of config.served_entities.entries()) {
      const source = e.entity_name;
      if (this.registry.has(source)) continue;
      const field = `${at}served_entities[${i}].entity_name`;
      if (!this.loader) throw badRequest(`'${source}' is not a model this server serves.`, field);
      if (!/\.gguf$/i.test(source) && !source.startsWith("hf:"))
        throw badRequest(`'${source}' is neither a model this server serves nor a .gguf path or hf: reference.`, field);
      try {
        await this.loader.check(source);
      } catch (err) {
        throw err instanceof ApiError && err.status === 400 ? err.withParam(field) : err;
      }
    }
    // Entities that are all loaded already can be checked for one API format now, not after a load.
    const loaded = config.served_entities.map((e) => e.entity_name).filter((m) => this.registry.get(m)?.engine);
    if (loaded.length === config.served_entities.length && new Set(loaded.map((m) => this.taskOf(m))).size > 1)
      throw badRequest("The served entities must expose the same API format (all chat models, or all embedding models).", `${at}served_entities`);
  }

  private liveConfig(config: EndpointConfig, version: number, models: Map<string, string>): LiveConfig {
    let upTo = 0;
    const bounds = config.traffic_config.routes
      .filter((r) => r.traffic_percentage > 0)
      .map((r) => ({ entity: r.served_model_name, upTo: (upTo += r.traffic_percentage) }));
    const first = models.values().next().value as string;
    return { config, version, models, bounds, task: this.taskOf(first) };
  }

  /**
   * Loads a config's entities in the background, then swaps it in (the old one serves until then).
   * `restoring`: the stored serving config, loaded again after a restart; `next`: the update to
   * carry on with once it is in (or has failed).
   */
  private startLoad(
    ep: Endpoint,
    config: EndpointConfig,
    version: number,
    opts: { stillFailed?: boolean; restoring?: boolean; next?: { config: EndpointConfig; version: number } } = {},
  ): void {
    const { stillFailed = false, restoring = false, next } = opts;
    ep.pending = { config, version };
    ep.configUpdate = "IN_PROGRESS";
    // Whether this load is still wanted: a DELETE of the endpoint drops it.
    const wanted = () => ep.pending?.version === version && this.provisioned.get(ep.name) === ep;
    const models = new Map<string, string>();
    let swapped = false;
    const job = (async () => {
      try {
        for (const e of config.served_entities) {
          const id = this.loader ? await this.loadEntity(ep, e.entity_name) : e.entity_name;
          if (!this.registry.get(id)?.engine) throw new Error(`the model '${id}' is not ready`);
          this.loadedAs.set(e.entity_name, id);
          models.set(e.name, id);
          if (!wanted()) return;
        }
        const tasks = new Set([...models.values()].map((m) => this.taskOf(m)));
        if (tasks.size > 1) throw new Error("the served entities must expose the same API format (all chat models, or all embedding models)");
        if (!wanted()) return;
        swapped = true;
        const previous = ep.live;
        ep.live = this.liveConfig(config, version, models);
        ep.unloaded = undefined;
        ep.pending = undefined;
        ep.configUpdate = stillFailed ? "UPDATE_FAILED" : "NOT_UPDATING";
        if (!stillFailed) ep.failure = undefined;
        if (restoring) {
          // The store already holds this config (and the update under way); it is not written again.
          if (next) this.startLoad(ep, next.config, next.version);
          return;
        }
        ep.updatedAt = Date.now();
        await this.store.update(ep.name, this.record(ep, config), ep.updatedAt);
        if (previous) await this.releaseUnused([...previous.models.values()]);
      } catch (err) {
        if (ep.pending?.version !== version) return;
        ep.pending = undefined;
        ep.configUpdate = "UPDATE_FAILED";
        ep.failure = err instanceof ApiError || err instanceof Error ? err.message : String(err);
        if (this.provisioned.get(ep.name) !== ep) return;
        // A stored serving config that no longer loads stays stored as it is (nothing is written): a
        // later restart, the file back in place say, serves it again. An update still to come is
        // tried all the same.
        if (restoring) {
          ep.unloaded = { config, version };
          if (next) this.startLoad(ep, next.config, next.version);
          return;
        }
        await this.store.update(ep.name, this.record(ep, ep.live?.config), Date.now()).catch(() => {});
      } finally {
        // A config that never came to serve (it failed, or its endpoint was deleted while it loaded)
        // leaves nothing loaded for it: the models it loaded for itself would otherwise stay in
        // memory with no endpoint to free them.
        if (!swapped && models.size > 0) await this.releaseUnused([...models.values()]).catch(() => {});
      }
    })();
    this.jobs.add(job);
    void job.finally(() => this.jobs.delete(job));
  }

  /**
   * An entity's model: a model served now by that id (loaded again if it was scaled to zero); else,
   * for an id that was loaded at run time before a restart, its source again under that id; else a
   * path or hub reference, under the id it gives unless another file holds that id (two versions of
   * \`model.gguf\` side by side in an A/B split), and shared with whatever already serves that file.
   */
  private async loadEntity(ep: Endpoint, entityName: string): Promise<string> {
    const source = ep.sources[entityName];
    if (typeof source === "string") {
      if (!this.registry.has(entityName)) return this.loader!.load(source, { name: entityName });
      // The id now names another file (a restart with another --model under that name): the
      // endpoint does not switch models without a word.
      const now = this.loader!.servedFrom(entityName);
      if (now !== undefined && now !== source)
        throw new Error(`the model '${entityName}' is now served from '${now}', not from '${source}' as when this endpoint was configured`);
    }
    return this.loader!.load(entityName, { unique: true });
  }

  /** Keeps where the config's run-time models came from (see Endpoint.sources). */
  private noteSources(ep: Endpoint, config: EndpointConfig): void {
    for (const e of config.served_entities) {
      const source = this.loader?.sourceOf(e.entity_name);
      if (source !== undefined) ep.sources[e.entity_name] = source;
    }
  }

  /** What the store keeps of an endpoint: the serving config, the one being loaded, why the last update failed. */
  private record(ep: Endpoint, config: EndpointConfig | undefined): JsonObject {
    const serving = ep.live ?? ep.unloaded;
    const pending = config && config !== serving?.config ? config : undefined;
    // Only the sources of entities still named by a config that is kept.
    const named = new Set([...(serving?.config.served_entities ?? []), ...(pending?.served_entities ?? [])].map((e) => e.entity_name));
    for (const name of Object.keys(ep.sources)) if (!named.has(name)) delete ep.sources[name];
    return {
      id: ep.id,
      creator: ep.creator,
      tags: ep.tags,
      ...(serving ? { config: serving.config, config_version: serving.version } : {}),
      ...(pending ? { pending_config: pending } : {}),
      ...(ep.configUpdate === "UPDATE_FAILED" && ep.failure !== undefined ? { failure: ep.failure } : {}),
      ...(Object.keys(ep.sources).length > 0 ? { entity_sources: ep.sources } : {}),
    } as JsonObject;
  }

  /** Unloads models whose every scale-to-zero endpoint has been idle long enough. */
  private async scaleToZero(): Promise<void> {
    if (!this.loader) return;
    const now = Date.now();
    const idle = new Map<string, boolean>();
    for (const ep of this.provisioned.values()) {
      const live = ep.live;
      if (!live) continue;
      for (const e of live.config.served_entities) {
        const model = live.models.get(e.name)!;
        const canSleep = e.scale_to_zero_enabled === true && now - ep.lastUsed >= this.opts.scaleToZeroAfterMs;
        idle.set(model, (idle.get(model) ?? true) && canSleep);
      }
    }
    for (const [model, sleep] of idle) {
      // Models the server was started with stay: their pay-per-token endpoints have no idle setting.
      if (!sleep || this.payPerToken.has(model) || this.registry.get(model)?.status !== "ready" || !this.loader.canReload(model)) continue;
      await this.loader.unload(model, { keep: true }).catch(() => {});
    }
  }
}
