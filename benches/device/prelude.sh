# Sourced by the device scripts: unpacks what travelled with the run.
# Binaries travel gzipped (the transfer is capped at 64 MiB); the Vulkan
# loader's Debian packages, where they came along in `.gl/`, are unpacked
# into / and NVIDIA's Vulkan driver is named to it.
out=${OUT:-/tmp/out}
mkdir -p "$out"
for f in .gpu/bin/*.gz; do [ -e "$f" ] && gunzip -f "$f"; done
chmod +x .gpu/bin/*
if compgen -G ".gl/*.deb" >/dev/null; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
egl=$(ldconfig -p | grep -o "/[^ ]*libEGL_nvidia.so.0" | head -1)
if [ -n "$egl" ]; then
  # Headless: the images' manifests name libGLX_nvidia, whose ICD finds no
  # display and creates no instance; the EGL library's works (seen on the
  # H200 machines, driver 580).
  printf '{"file_format_version":"1.0.1","ICD":{"library_path":"%s","api_version":"1.4.312"}}\n' \
    "$egl" >/tmp/nvidia_icd_egl.json
  export VK_DRIVER_FILES=/tmp/nvidia_icd_egl.json
elif [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

export CARGO_TARGET_DIR=/tmp/rocmforge-target
mkdir -p "$CARGO_TARGET_DIR/models"
# Only the fixtures whose files travelled (see docs/vulkan.md); references
# without a committed model (generated families) are not fixtures.
fixtures=""
for f in testdata/reference/*.logits; do
  g="${f%.logits}.gguf"
  [ -f "$f" ] && [ ! -L "$f" ] && [ -f "$g" ] && [ ! -L "$g" ] &&
    fixtures="$fixtures${fixtures:+,}$(basename "$f" .logits)"
done
export ROCMFORGE_FIXTURES=$fixtures
