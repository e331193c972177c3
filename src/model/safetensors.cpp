// model/safetensors.cpp — header parsing with strict validation: 8-byte little-endian header
// length, JSON header, each tensor's [begin, end) inside the data section, its size equal to
// numel × dtype size, and no two tensors overlapping.
#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace rill {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

bool safetensors_dtype(const std::string& s, DType& out) {
  if (s == "F32") out = DType::f32;
  else if (s == "F16") out = DType::f16;
  else if (s == "BF16") out = DType::bf16;
  else if (s == "I32") out = DType::i32;
  else if (s == "I8") out = DType::i8;
  else if (s == "U8") out = DType::u8;
  else return false;
  return true;
}

std::string safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i32: return "I32";
    case DType::i8: return "I8";
    case DType::u8: return "U8";
  }
  return "?";
}

}  // namespace

SafetensorsFile::SafetensorsFile(const fs::path& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail("{}: cannot open: {}", path.string(), std::strerror(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fail("{}: cannot stat: {}", path.string(), std::strerror(errno));
  }
  size_ = size_t(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    fail("{}: truncated safetensors file ({} bytes, the 8-byte header length is missing)", path.string(), size_);
  }
  map_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    fail("{}: mmap failed: {}", path.string(), std::strerror(errno));
  }
  try {
    const auto* bytes = static_cast<const unsigned char*>(map_);
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
    if (header_len > size_ - 8)
      fail("{}: truncated safetensors file: header length {} exceeds the file size {}", path.string(),
           header_len, size_);
    json header;
    try {
      header = json::parse(bytes + 8, bytes + 8 + header_len);
    } catch (const json::exception& e) {
      fail("{}: safetensors header is not valid JSON: {}", path.string(), e.what());
    }
    if (!header.is_object()) fail("{}: safetensors header is not a JSON object", path.string());
    const size_t data_begin = 8 + header_len;
    const size_t data_size = size_ - data_begin;
    std::vector<std::pair<size_t, size_t>> ranges;
    for (auto& [name, entry] : header.items()) {
      if (name == "__metadata__") {
        if (entry.is_object())
          for (auto& [k, v] : entry.items())
            if (v.is_string()) metadata_[k] = v.get<std::string>();
        continue;
      }
      auto where = [&] { return fmt::format("{}: tensor '{}'", path.string(), name); };
      if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
          !entry.contains("data_offsets"))
        fail("{}: entry must have dtype, shape and data_offsets", where());
      TensorInfo info;
      info.name = name;
      info.file = path;
      if (!entry["dtype"].is_string() || !safetensors_dtype(entry["dtype"].get<std::string>(), info.dtype))
        fail("{}: unsupported dtype {}", where(), entry["dtype"].dump());
      const json& shape = entry["shape"];
      if (!shape.is_array() || shape.size() > size_t(Tensor::kMaxDims))
        fail("{}: shape must be an array of at most {} dimensions", where(), Tensor::kMaxDims);
      uint64_t numel = 1;
      for (const json& d : shape) {
        if (!d.is_number_unsigned()) fail("{}: shape {} has a non-integer dimension", where(), shape.dump());
        uint64_t v = d.get<uint64_t>();
        if (v > (uint64_t(1) << 40)) fail("{}: dimension {} is implausibly large", where(), v);
        info.shape.push_back(int64_t(v));
        numel *= v;
      }
      const json& off = entry["data_offsets"];
      if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
        fail("{}: data_offsets must be two non-negative integers", where());
      uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
      if (b > e || e > data_size)
        fail("{}: data_offsets [{}, {}) out of range: the data section has {} bytes (truncated or lying header)",
             where(), b, e, data_size);
      if (e - b != numel * dtype_size(info.dtype))
        fail("{}: {} bytes in the file but dtype {} with shape {} needs {} (dtype/shape mismatch)", where(), e - b,
             entry["dtype"].get<std::string>(), shape.dump(), numel * dtype_size(info.dtype));
      info.data = bytes + data_begin + b;
      info.nbytes = size_t(e - b);
      ranges.emplace_back(b, e);
      tensors_.emplace(name, std::move(info));
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i)
      if (ranges[i].first < ranges[i - 1].second)
        fail("{}: tensors overlap at byte {} of the data section", path.string(), ranges[i].first);
  } catch (...) {
    ::munmap(map_, size_);
    map_ = nullptr;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, size_);
}

WeightStore::WeightStore(const fs::path& model_dir) : dir_(model_dir) {
  fs::path single = model_dir / "model.safetensors";
  fs::path index = model_dir / "model.safetensors.index.json";
  if (fs::exists(index)) {
    std::ifstream in(index);
    json j;
    try {
      j = json::parse(in);
    } catch (const json::exception& e) {
      fail("{}: not valid JSON: {}", index.string(), e.what());
    }
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      fail("{}: field 'weight_map' is missing or not an object", index.string());
    std::map<std::string, SafetensorsFile*> shards;
    for (auto& [name, shard] : j["weight_map"].items()) {
      if (!shard.is_string()) fail("{}: weight_map['{}'] is not a file name", index.string(), name);
      std::string file = shard.get<std::string>();
      if (file.find('/') != std::string::npos || file.find("..") != std::string::npos)
        fail("{}: weight_map['{}'] names a file outside the model directory: {}", index.string(), name, file);
      auto it = shards.find(file);
      if (it == shards.end()) {
        if (!fs::exists(model_dir / file))
          fail("{}: shard {} (named for '{}') does not exist", index.string(), file, name);
        files_.push_back(std::make_unique<SafetensorsFile>(model_dir / file));
        it = shards.emplace(file, files_.back().get()).first;
      }
      auto t = it->second->tensors().find(name);
      if (t == it->second->tensors().end())
        fail("{}: weight '{}' is listed for {} but that shard does not contain it", index.string(), name, file);
      index_[name] = &t->second;
    }
  } else if (fs::exists(single)) {
    files_.push_back(std::make_unique<SafetensorsFile>(single));
    for (auto& [name, info] : files_.back()->tensors()) index_[name] = &info;
  } else {
    fail("{}: no model.safetensors or model.safetensors.index.json", model_dir.string());
  }
}

const TensorInfo& WeightStore::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) fail("{}: missing weight '{}'", dir_.string(), name);
  return *it->second;
}

Tensor WeightStore::view(const std::string& name) const {
  const TensorInfo& info = get(name);
  return Tensor(const_cast<void*>(info.data), info.dtype, info.shape);
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  for (auto& [n, _] : index_) out.push_back(n);
  return out;
}

size_t WeightStore::total_bytes() const {
  size_t total = 0;
  for (auto& [_, info] : index_) total += info->nbytes;
  return total;
}

void write_safetensors(const fs::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", safetensors_dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.nbytes}}};
    offset += t.nbytes;
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8) h.push_back(' ');  // data section 8-byte aligned, as the reference writer does
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail("{}: cannot open for writing", path.string());
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out.put(char((n >> (8 * i)) & 0xff));
  out.write(h.data(), std::streamsize(h.size()));
  for (const auto& t : tensors) out.write(static_cast<const char*>(t.data), std::streamsize(t.nbytes));
  if (!out) fail("{}: write failed (disk full?)", path.string());
}

}  // namespace rill
