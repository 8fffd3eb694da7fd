// SPDX-License-Identifier: Apache-2.0
// SPDX-FileCopyrightText: Copyright The Lance Authors

pub mod binary;
pub mod blob;
pub mod list;
pub mod primitive;
pub mod r#struct;
