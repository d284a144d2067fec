// The one list of layers. Adding a layer is its folder and its line here.
#include <algorithm>
#include <vector>

#include "layers/cuda/info.h"
#include "layers/driver/info.h"
#include "layers/gpu/info.h"
#include "layers/layer.h"
#include "layers/nccl/info.h"
#include "layers/os/info.h"
#include "layers/python/info.h"
#include "layers/torch/info.h"

namespace eacgm {

std::span<const LayerInfo* const> layer_registry() {
  static const LayerInfo* const kLayers[] = {
      &cuda_layer_info(),   &driver_layer_info(), &nccl_layer_info(), &torch_layer_info(),
      &python_layer_info(), &os_layer_info(),     &gpu_layer_info(),
  };
  return kLayers;
}

const LayerInfo& layer_info(Layer layer) {
  // Indexed by id once: the event path asks for every call.
  static const std::vector<const LayerInfo*> by_id = [] {
    std::vector<const LayerInfo*> out;
    for (const LayerInfo* info : layer_registry()) {
      const auto id = static_cast<size_t>(info->id);
      if (out.size() <= id) out.resize(id + 1, nullptr);
      out[id] = info;
    }
    return out;
  }();
  const auto id = static_cast<size_t>(layer);
  if (id < by_id.size() && by_id[id]) return *by_id[id];
  // A Layer is only ever made from a registered id (decoding checks the wire's): a bug.
  static const LayerInfo unknown{.id = layer, .name = "unknown", .source = LayerSource::kUserSpace};
  return unknown;
}

std::span<const Layer> all_layers() {
  static const std::vector<Layer> ids = [] {
    std::vector<Layer> out;
    for (const LayerInfo* info : layer_registry()) out.push_back(info->id);
    return out;
  }();
  return ids;
}

std::string_view layer_name(Layer layer) { return layer_info(layer).name; }

std::optional<Layer> layer_from_name(std::string_view name) {
  for (const LayerInfo* info : layer_registry()) {
    if (info->name == name) return info->id;
  }
  return std::nullopt;
}

std::optional<Layer> library_layer(std::string_view path) {
  const size_t slash = path.rfind('/');
  const std::string_view base = slash == std::string_view::npos ? path : path.substr(slash + 1);
  for (const LayerInfo* info : layer_registry()) {
    for (std::string_view prefix : info->libraries) {
      if (base.starts_with(prefix)) return info->id;
    }
  }
  return std::nullopt;
}

std::optional<Layer> collective_layer() {
  for (const LayerInfo* info : layer_registry()) {
    if (info->collectives) return info->id;
  }
  return std::nullopt;
}

std::string status_name(Layer layer, int64_t code) {
  const LayerInfo& info = layer_info(layer);
  return info.status_name ? std::string(info.status_name(code)) : std::to_string(code);
}

}  // namespace eacgm
