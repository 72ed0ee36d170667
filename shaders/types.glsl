// Buffer-reference types: every kernel receives 64-bit device addresses in
// its push constants (VK_KHR_buffer_device_address) and reads or writes
// through these views. No descriptor sets, so no maxStorageBufferRange limit.
#ifndef TYPES_GLSL
#define TYPES_GLSL

#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_16bit_storage : require

layout(buffer_reference, std430, buffer_reference_align = 1) buffer U8s { uint8_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer U16s { uint16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer U32s { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer F16s { float16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32s { float v[]; };
// Four f32 at a 16-byte-aligned address (activation rows: arena offsets are
// 256-aligned and row lengths multiples of 32).
layout(buffer_reference, std430, buffer_reference_align = 16) buffer V4s { vec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer U4s { uvec4 v[]; };

#endif
