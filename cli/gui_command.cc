#include "cli/gui_command.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "cli/common.h"
#include "core/status.h"

namespace dsplan {

DeclaredCommand AddGuiCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "gui", "Start dsplan-gui, the desktop app for exploring plans (docs/gui.md); further "
             "arguments go to it");
  cmd->allow_extras();
  cmd->prefix_command();
  // The arguments after `gui` are dsplan-gui's own, passed on unparsed.
  return {cmd, [cmd] { return RunGuiCommand(cmd->remaining()); }};
}

std::string GuiProgramBeside(const std::string& dsplan_exe) {
  std::error_code ec;
  const std::filesystem::path gui =
      std::filesystem::path(dsplan_exe).parent_path() / "dsplan-gui";
  if (!std::filesystem::is_regular_file(gui, ec)) return "";
  if (access(gui.c_str(), X_OK) != 0) return "";
  return gui.string();
}

int RunGuiCommand(const std::vector<std::string>& args) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string gui = ec ? std::string() : GuiProgramBeside(self.string());
  if (gui.empty()) {
    return Fail(Status::NotFound(fmt::format(
        "dsplan gui: no dsplan-gui beside {} (it is built only where Qt 6 is installed: run "
        "scripts/setup.sh, then cmake --build build)",
        ec ? std::string("the dsplan binary") : self.string())));
  }
  std::vector<char*> argv;
  std::string name = "dsplan-gui";
  argv.push_back(name.data());
  std::vector<std::string> copy = args;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  execv(gui.c_str(), argv.data());
  return Fail(Status::IoError(fmt::format("dsplan gui: could not start {}: {}", gui,
                                          std::strerror(errno))));
}

}  // namespace dsplan
