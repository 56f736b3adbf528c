import type { ModelRegistry } from "../../core/registry.ts";
import type { Endpoint, EndpointConfig, EndpointManager } from "./endpoints.ts";

type Obj = Record<string, unknown>;

/** A served entity's deployment state, from its model's state in the registry. */
function entityState(registry: ModelRegistry, model: string | undefined): Obj {
  const m = model === undefined ? undefined : registry.get(model);
  if (!m) return { deployment: "DEPLOYMENT_CREATING", deployment_state_message: "Waiting for the config to load." };
  switch (m.status) {
    case "ready":
      return { deployment: "DEPLOYMENT_READY", deployment_state_message: "" };
    case "loading":
      return { deployment: "DEPLOYMENT_CREATING", deployment_state_message: `Loading the model '${m.id}'.` };
    case "unloaded":
      return { deployment: "DEPLOYMENT_READY", deployment_state_message: "Scaled to zero: the next request loads the model again.", scaled_to_zero: true };
    case "failed":
      return { deployment: "DEPLOYMENT_FAILED", deployment_state_message: m.error ?? "The model failed to load." };
  }
}

function configView(registry: ModelRegistry, config: EndpointConfig, version: number, models?: Map<string, string>): Obj {
  return {
    served_entities: config.served_entities.map((e) => {
      const model = models?.get(e.name);
      return {
        ...e,
        entity_version: e.entity_version == null ? null : String(e.entity_version),
        scale_to_zero_enabled: e.scale_to_zero_enabled ?? false,
        ...(model !== undefined ? { model } : {}),
        state: models ? entityState(registry, model) : { deployment: "DEPLOYMENT_CREATING", deployment_state_message: "Loading." },
      };
    }),
    traffic_config: config.traffic_config,
    config_version: version,
  };
}

/** An endpoint in Databricks' ServingEndpointDetailed shape. */
export function endpointView(ep: Endpoint, manager: EndpointManager, registry: ModelRegistry): Obj {
  const live = ep.live;
  const firstModel = live?.models.values().next().value as string | undefined;
  return {
    name: ep.name,
    id: ep.id,
    creator: ep.creator,
    creation_timestamp: ep.createdAt,
    last_updated_timestamp: ep.updatedAt,
    endpoint_type: ep.kind === "pay-per-token" ? "FOUNDATION_MODEL_API" : "PROVISIONED_THROUGHPUT",
    task: firstModel ? manager.taskOf(firstModel) : null,
    state: { ready: live ? "READY" : "NOT_READY", config_update: ep.configUpdate },
    ...(live ? { config: configView(registry, live.config, live.version, live.models) } : {}),
    ...(ep.pending ? { pending_config: { ...configView(registry, ep.pending.config, ep.pending.version), start_time: ep.updatedAt } } : {}),
    ...(ep.failure ? { state_message: ep.failure } : {}),
    tags: ep.tags,
  };
}
