// Device: where a tensor's storage lives, a small validated value type ("cpu", "cuda", "cuda:1").
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace tapegrad {

enum class DeviceKind : uint8_t { CPU = 0, CUDA = 1 };
constexpr int kNumDeviceKinds = 2;

class Device {
 public:
  // Throws tapegrad::Error for a negative index or an index on the CPU other than 0.
  Device(DeviceKind kind = DeviceKind::CPU, int index = 0);
  // Parses "cpu", "cpu:0", "cuda", "cuda:N"; throws tapegrad::Error on anything else.
  Device(const std::string& spec);
  Device(const char* spec) : Device(std::string(spec)) {}

  DeviceKind kind() const { return kind_; }
  int index() const { return index_; }
  bool is_cpu() const { return kind_ == DeviceKind::CPU; }
  bool is_cuda() const { return kind_ == DeviceKind::CUDA; }
  std::string str() const;

  bool operator==(const Device& o) const { return kind_ == o.kind_ && index_ == o.index_; }
  bool operator!=(const Device& o) const { return !(*this == o); }

 private:
  DeviceKind kind_;
  int index_;
};

const char* device_kind_name(DeviceKind kind);
std::ostream& operator<<(std::ostream& out, const Device& device);

inline const Device kCPU{DeviceKind::CPU, 0};
inline const Device kCUDA{DeviceKind::CUDA, 0};

namespace cuda {
// Both answer without failing on a machine that has no GPU, no driver, or a build without CUDA.
bool is_available();
int device_count();
}  // namespace cuda

}  // namespace tapegrad
