#include "app/printable_sink.hpp"

#include <string_view>

#include "kernel/support/printable.hpp"

namespace rcsim {

void PrintableSink::log(const spdlog::details::log_msg& msg) {
  const std::string text = printable(std::string_view(msg.payload.data(), msg.payload.size()), kLogLineLimit);
  spdlog::details::log_msg escaped(msg);
  escaped.payload = spdlog::string_view_t(text.data(), text.size());
  inner_->log(escaped);
}

}  // namespace rcsim
